"""Real verl GRPO on CPU (groundwork for "Real training"; see docker/verl-cpu/README.md): `platform` (verl's `cpu`
platform, loaded by verl through `VERL_USE_EXTERNAL_MODULES=grpo_verl_cpu.platform`), `tiny_model` (the built-in
tiny Qwen2 model, made deterministically offline), `reward` (verl's GSM8K score plus a digit-shaping term).
Not part of the launcher: the CPU image carries it at /opt/grpo-launcher/python (docker/Dockerfile.cpu), and nothing
imports it but verl and vLLM, from names the entrypoint puts in the environment and the override list."""
