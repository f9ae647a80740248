"""workloads.py: the PyTorch training workloads devrt is measured on, with random weights and random
data (nothing downloaded), and run(spec): one worker process's whole run, as a JSON-ready dict.

    gpt       GPT-style LM: 12 layers, d_model 768, 12 heads, vocabulary 32000, batch 16,
              sequence 512, bf16 autocast, AdamW
    resnet50  ResNet-50 (torchvision's, else the compact one below): batch 64, 224x224,
              channels_last, bf16 autocast, SGD with momentum
    varlen    6-layer LM, d_model 1024, 16 heads, vocabulary 32000, batch 16, bf16 autocast,
              AdamW; the sequence length is drawn from 64..1024 every step
    empty     not training: torch.empty(n, device="cuda") and its release in a tight loop, per size

A spec (a dict) says: workload, allocator ("devrt", "native", "expandable" or "async": the
process's PYTORCH_CUDA_ALLOC_CONF must already say expandable_segments:True or
backend:cudaMallocAsync for those), steps, warmup, seed,
and optionally log (devrt's allocation log file), budget (devrt's budget), config (overrides of
the workload's sizes), cleanup (measure what devrt still holds after the model is dropped).
"""
import gc
import math
import os
import random
import time

CONFIGS = {
    "gpt": dict(layers=12, d_model=768, heads=12, vocab=32000, batch=16, seq=512),
    "resnet50": dict(batch=64, image=224, classes=1000),
    "varlen": dict(layers=6, d_model=1024, heads=16, vocab=32000, batch=16, seq_min=64,
                   seq_max=1024),
    "empty": dict(sizes=[256, 4096, 65536, 1 << 20, 16 << 20, 256 << 20], iters=20000, rounds=7),
}
MIB = 1 << 20
# The arms that run devrt.torch.use(): its defaults, and "caching" (the process's DEVRT_ARENA=0).
DEVRT_ARMS = ("devrt", "caching")


def _models():
    """The model classes, defined once torch is imported (this module imports without torch)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class LM(nn.Module):
        """A GPT-style decoder: token and position embeddings, pre-norm blocks, tied head."""

        def __init__(self, layers, d_model, heads, vocab, max_seq):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_seq, d_model)
            self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)
            self.head.weight = self.tok.weight
            nn.init.normal_(self.tok.weight, std=0.02)  # GPT-2's scale: a loss near ln(vocab)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            return F.relu(self.body(x) + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        """ResNet-50's layout (3, 4, 6, 3 bottlenecks), for machines without torchvision."""

        def __init__(self, classes):
            super().__init__()
            layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                           nn.ReLU(True), nn.MaxPool2d(3, 2, 1)], 64
            for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(n):
                    layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(self.features(x).mean((2, 3)))

    return LM, ResNet50


class Workload:
    """A model, its optimizer and its random data; step() trains one step, returns the loss."""

    def __init__(self, name, cfg, seed):
        import torch
        import torch.nn.functional as F

        LM, ResNet50 = _models()
        self.name, self.cfg, self.model_name = name, cfg, name
        torch.manual_seed(seed)
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self.lengths = random.Random(seed)
        if name == "resnet50":
            try:
                import torchvision

                model = torchvision.models.resnet50(weights=None, num_classes=cfg["classes"])
                self.model_name = "torchvision resnet50"
            except ImportError:
                model = ResNet50(cfg["classes"])
                self.model_name = "devrt.bench resnet50 (no torchvision)"
            self.model = model.cuda().to(memory_format=torch.channels_last)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                                       weight_decay=1e-4)
        else:
            seq = cfg.get("seq") or cfg["seq_max"]
            self.model = LM(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["vocab"], seq).cuda()
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4)
        self.torch, self.F = torch, F

    def batch(self):
        torch, cfg = self.torch, self.cfg
        if self.name == "resnet50":
            x = torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"], device="cuda",
                            generator=self.gen).to(memory_format=torch.channels_last)
            y = torch.randint(0, cfg["classes"], (cfg["batch"],), device="cuda", generator=self.gen)
            return x, y
        t = cfg.get("seq") or self.lengths.randint(cfg["seq_min"], cfg["seq_max"])
        tok = torch.randint(0, cfg["vocab"], (cfg["batch"], t + 1), device="cuda",
                            generator=self.gen)
        return tok[:, :-1], tok[:, 1:]

    def step(self):
        torch = self.torch
        x, y = self.batch()
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = self.model(x)
            loss = self.F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        self.opt.step()
        return loss.detach()


def _empty_loop(cfg):
    """ns per torch.empty(n, device="cuda") + release, per size: median, p10, p90 of rounds."""
    import torch

    out = {}
    for n in cfg["sizes"]:
        for _ in range(1000):
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            del x
        per = []
        for _ in range(cfg["rounds"]):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(cfg["iters"]):
                x = torch.empty(n, dtype=torch.uint8, device="cuda")
                del x
            per.append((time.perf_counter_ns() - t0) / cfg["iters"])
        per.sort()
        out[str(n)] = {"median": per[len(per) // 2], "p10": per[len(per) // 10],
                       "p90": per[min(len(per) - 1, (len(per) * 9) // 10)]}
    return out


def run(spec):
    """One process's run of spec (module docstring): the measured figures as a dict."""
    import devrt

    allocator = spec["allocator"]
    if allocator in DEVRT_ARMS:
        import devrt.torch

        if spec.get("log") or spec.get("budget"):
            devrt.configure(budget=spec.get("budget"), log=spec.get("log"))
        devrt.torch.use(0)
    else:
        need = {"async": "backend:cudaMallocAsync", "expandable": "expandable_segments:True"}
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        if allocator in need and need[allocator] not in conf:
            raise RuntimeError(f"allocator {allocator} needs PYTORCH_CUDA_ALLOC_CONF={need[allocator]}")
    import torch

    name = spec["workload"]
    cfg = dict(CONFIGS[name], **spec.get("config", {}))
    doc = {"workload": name, "allocator": allocator, "config": cfg, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0),
           "backend": torch.cuda.memory.get_allocator_backend()}
    if name == "empty":
        doc["ns_per_alloc"] = _empty_loop(cfg)
        return doc
    w = Workload(name, cfg, spec.get("seed", 0))
    doc["model"] = w.model_name
    times, losses = [], []
    for i in range(spec["warmup"] + spec["steps"]):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = w.step().item()
        torch.cuda.synchronize()
        if i >= spec["warmup"]:
            times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss)
    doc.update(step_ms=times, losses=losses, finite=all(math.isfinite(x) for x in losses))
    if allocator in DEVRT_ARMS:
        doc["peak_reserved"] = devrt.pool()["reserved_high"]
        doc["figures"] = devrt.figures()
    else:
        doc["peak_reserved"] = torch.cuda.max_memory_reserved()
    if spec.get("cleanup") and allocator in DEVRT_ARMS:
        del w, loss
        gc.collect()
        torch._C._cuda_clearCublasWorkspaces()  # PyTorch keeps cuBLAS workspaces until this
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # devrt.release() through the allocator's reset hook
        doc["after_cleanup"] = {"figures": devrt.figures(), "torch_tag": devrt.stats(tag="torch"),
                                "pool": devrt.pool(),
                                "empty_cache_errors": [repr(e) for e in
                                                       devrt.torch.empty_cache_errors]}
    return doc
