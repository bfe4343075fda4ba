"""The real-model pipeline: SmolLM2 made a target, drafters trained and served."""
