"""Job triage: from a failed or hung Slurm job to its suspects, read-only (`fleetfix triage`).

suspects.py ranks (pure, over probe data and log accusations); logs.py turns the job's log files
into accusations; run.py finds the job in Slurm, probes its nodes and puts it together.
"""
