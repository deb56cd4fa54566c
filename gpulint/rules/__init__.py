"""GPU delegate rules: rule packs (YAML), the checks they name, and the engine that applies them."""
