"""Compute calibration: the torch microbenchmarks (`compute_bench`) of the kernels the workload issues
(`compute_kernels`), fitted into a device file (`compute_fit`) with the routines the network calibration
shares (`armillary.fitting`), the raw measurements and the round trip (`compute_records`), the whole run (`run`) and
the end-to-end check on a training step (`train_step`)."""
