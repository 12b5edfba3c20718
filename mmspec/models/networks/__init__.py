"""Our own networks, checkpoint-compatible with their originals: LlamaGen (image), its video
variant, LPD, and the recipe of the shipped captioner (a transformers LLaVA at our sizes)."""
