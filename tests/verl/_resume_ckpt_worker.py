"""torchrun worker for tests/verl/test_resume_verl.py: a real verl FSDP checkpoint at global_step_2 and _4.

Run as `torchrun --nproc_per_node=2 _resume_ckpt_worker.py CKPT_DIR` on CPU (gloo). A tiny random
Qwen2ForCausalLM (as `_eval_ckpt_worker.py`) in FSDP1 is saved twice by verl's own
`FSDPCheckpointManager` into CKPT_DIR/global_step_N/actor, the layout `_save_checkpoint` leaves; then,
as the trainer does after each save, rank 0 writes global_step_N/data.pt and the tracker
`latest_checkpointed_iteration.txt`. data.pt holds a plain dict standing in for the dataloader's
state: the trainer's StatefulDataLoader comes from torchdata, which this test environment lacks, and
the resume decision only checks that the file is there.
"""

import os
import sys

import torch
import torch.distributed as dist

from _eval_ckpt_worker import tiny_tokenizer  # run as a script: its directory is on sys.path


def main(ckpt_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    config.architectures = ["Qwen2ForCausalLM"]
    model = Qwen2ForCausalLM(config).to(torch.float32)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    fsdp = FSDP(model, device_mesh=mesh, use_orig_params=True, device_id=torch.device("cpu"))
    optim = torch.optim.AdamW(fsdp.parameters(), lr=1e-3)
    manager = FSDPCheckpointManager(model=fsdp, optimizer=optim, lr_scheduler=None,
                                    processing_class=tiny_tokenizer(), checkpoint_config=None)
    for step in (2, 4):
        step_dir = os.path.join(ckpt_dir, f"global_step_{step}")
        manager.save_checkpoint(os.path.join(step_dir, "actor"), global_step=step)
        dist.barrier()
        if rank == 0:
            torch.save({"stand_in_for": "StatefulDataLoader.state_dict()", "step": step},
                       os.path.join(step_dir, "data.pt"))
            with open(os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(step))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
