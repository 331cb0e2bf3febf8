"""Unitree G1 facts and model builders: the one source of truth for robot constants."""
