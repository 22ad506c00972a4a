"""Workload sources: the operator, fused and architecture suites, user models and problem folders
(``steptp.zoo.workloads`` is the registry), and the PyTorch → Relax import."""
