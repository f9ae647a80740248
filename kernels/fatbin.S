/* fatbin.S: embeds the nvcc-built fatbin of kernels/devrt_kernels.cu as devrt_fatbin. */
  .section .rodata
  .balign 64
  .globl devrt_fatbin
  .hidden devrt_fatbin
devrt_fatbin:
  .incbin DEVRT_FATBIN_PATH
  .byte 0
  .section .note.GNU-stack,"",@progbits
