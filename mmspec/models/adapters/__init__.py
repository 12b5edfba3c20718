"""transformers models, unmodified, as `TokenModel`s: Emu3, Janus, the Chameleon family
(Lumina-mGPT, Anole), MusicGen, any causal LM or VLM, and MeshXL's OPT."""
