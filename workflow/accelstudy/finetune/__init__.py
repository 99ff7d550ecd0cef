"""Part 2: LoRA / full fine-tuning under DDP, DeepSpeed ZeRO-3 and FSDP, one point per job."""
