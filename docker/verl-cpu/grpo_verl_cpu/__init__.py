"""Real verl GRPO on CPU (groundwork for "Real training"; see docker/verl-cpu/README.md): `platform` (verl's `cpu`
platform, loaded by verl through `VERL_USE_EXTERNAL_MODULES=grpo_verl_cpu.platform`), `tiny_model` (the built-in
tiny Qwen2 model, made deterministically offline), `reward` (verl's GSM8K score plus a digit-shaping term).
Not part of the launcher and not in the image yet: nothing imports it but verl, from names in the environment."""
