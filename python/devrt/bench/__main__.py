"""python -m devrt.bench torch [options]: see devrt/bench/torch_bench.py (--help)."""
import sys

from .torch_bench import main

if __name__ == "__main__":
    sys.exit(main())
