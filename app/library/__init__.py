"""The model library: the catalog and machine detection, local models, downloads, the embedded
default model, and the one reader of what a user types for a model or a draft (model_spec)."""
