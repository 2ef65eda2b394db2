"""Event simulation of a step as a task graph (`simulate.run.simulate_training`, `simulate.inference`; the public
call is `armillary.run_simulation`)."""
