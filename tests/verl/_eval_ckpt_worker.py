"""torchrun worker for tests/verl/test_eval_merge.py: write a real verl FSDP checkpoint of a tiny model.

Run as `torchrun --nproc_per_node=2 _eval_ckpt_worker.py OUT_DIR` on CPU (gloo). Rank 0 first builds
a tiny random Qwen2ForCausalLM (config in code: hidden 32, 2 layers, vocab 128; seeded, so every
rank builds the same weights) and a tiny tokenizer trained with the `tokenizers` library; the model
is wrapped in FSDP1 on a ("fsdp",) device mesh and saved with verl's own `FSDPCheckpointManager`
into OUT_DIR/global_step_3/actor, exactly the layout a training run leaves (notes/verl.md §8.2).
Rank 0 also writes the original full state dict to OUT_DIR/original.pt for the comparison, and
`latest_checkpointed_iteration.txt` as verl's trainer does after a save.
"""

import os
import sys

import torch
import torch.distributed as dist


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=100, special_tokens=["<unk>", "<pad>", "<eos>"])
    tok.train_from_iterator(["Natalia sold 48 clips in April and half as many in May. #### 72"] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")


def main(out_dir: str) -> None:
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
    config.architectures = ["Qwen2ForCausalLM"]  # the merger reads it (notes/verl.md §8.4)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, os.path.join(out_dir, "original.pt"))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    # device_id=cpu: torch >= 2.10 refuses FSDP1 on CPU unless the device is named explicitly.
    fsdp = FSDP(model, device_mesh=mesh, use_orig_params=True, device_id=torch.device("cpu"))
    optim = torch.optim.AdamW(fsdp.parameters(), lr=1e-3)
    manager = FSDPCheckpointManager(model=fsdp, optimizer=optim, lr_scheduler=None,
                                    processing_class=tiny_tokenizer(), checkpoint_config=None)
    step_dir = os.path.join(out_dir, "global_step_3")
    manager.save_checkpoint(os.path.join(step_dir, "actor"), global_step=3)
    dist.barrier()
    if rank == 0:
        with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("3")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
