"""Shipped presets: one data file per model, device and system. The registry is the directory."""
