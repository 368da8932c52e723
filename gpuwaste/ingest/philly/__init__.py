"""The Microsoft Philly trace -> jobs, job_gpus, gpu_samples, host_samples."""
