"""gpu_processes output shared by the probe's tests and kill_orphans' tests: two CUDA
processes, bob's of finished job 48100 and alice's of running job 48213, as the probe's
nvidia-smi and owners sections print them (user padded as `ps -o user:32=` pads it)."""

from __future__ import annotations

QUERY = """### fleetfix query-compute-apps timeout=15
5120, python3, GPU-a1b2c3d4-0000-0000-0000-000000000001, 00000000:18:00.0, 40960 MiB
6230, python3, GPU-a1b2c3d4-0000-0000-0000-000000000002, 00000000:2A:00.0, 61234 MiB
### fleetfix end rc=0
"""
OWNERS = """### fleetfix owners
pid 5120 bob                              Mon Dec  7 09:01:12 2026 python3 train.py --resume
pid 6230 alice                            Mon Dec  7 15:31:58 2026 python3 /home/alice/llm.py
cgroup 5120 0::/system.slice/slurmstepd.scope/job_48100/step_0/user/task_0
cgroup 6230 0::/system.slice/slurmstepd.scope/job_48213/step_0/user/task_0
### fleetfix end rc=0
"""
