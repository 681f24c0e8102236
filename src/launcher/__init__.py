"""grpo-launcher: run verl GRPO experiments on Kubernetes through the Kubeflow Training Operator or KubeRay."""

__version__ = "0.1.0"
