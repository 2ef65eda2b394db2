"""Design-space search: strategy spaces evaluated in chunks of arrays, top-k, executors."""
