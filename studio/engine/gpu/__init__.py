"""The engine's GPU path: the transformer set up for speed (`gpu_setup`: compile, attention backend, kernels, CUDA
graphs), the engine's own kernels (`kernels`), the attention backends (`attention`), CUDA graphs per shape
(`graphs`), and what start-up compiles and measures, kept across starts (`compile_cache`, with `compile_fixes`
mending a torch.compile cache bug where the installed torch has it)."""
