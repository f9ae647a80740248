/* fatbin.S: embeds the nvcc-built fatbin of examples/engine/kernels.cu as eg_fatbin. */
  .section .rodata
  .balign 64
  .globl eg_fatbin
  .hidden eg_fatbin
eg_fatbin:
  .incbin EG_FATBIN_PATH
  .byte 0
  .section .note.GNU-stack,"",@progbits
