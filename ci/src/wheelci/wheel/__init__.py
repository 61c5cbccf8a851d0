"""The wheel format only: the zip reader and writer, RECORD, METADATA, names. No torch or CUDA policy."""
