"""The static, index-addressed KV cache and the glue that lets transformers' decoder layers
write to it (one tree-attention forward for every adapter)."""
