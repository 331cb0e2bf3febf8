"""The train<->deploy contract: observation layout, artifact schema, trained artifacts."""
