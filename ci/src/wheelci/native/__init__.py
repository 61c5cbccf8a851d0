"""ELF files and the runtime-library policy of torch and CUDA."""
