"""Request-level serving simulation: traces, the continuous-batching scheduler, and its metrics."""
