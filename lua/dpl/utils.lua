-- dpl.utils: torch.utils' counterparts. dpl.utils.checkpoint is activation checkpointing
-- (lua/dpl/checkpoint.lua): dpl.utils.checkpoint(fn, ...) or dpl.utils.checkpoint.checkpoint(fn, ...),
-- and dpl.utils.checkpoint.checkpoint_sequential.
return {
  checkpoint = require 'dpl.checkpoint',
}
