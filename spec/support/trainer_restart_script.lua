-- trainer_restart_script.lua: a DDP fit under `dplhost --nproc 2 --max-restarts K` that
-- resumes with fit(..., {ckpt_path='last'}) and ModelCheckpoint{save_last=true}.
-- arg[1]: straight (no failure) | fail (rank 1 exits 3 at epoch 2, batch 3, on the first
-- attempt only) | always (rank 1 exits 3 there on every attempt); arg[2]: checkpoint dir;
-- arg[3] = 'steps': last.ckpt after every optimizer step (the restart resumes mid-epoch).
-- chaos (with 'steps'): attempt a < arg[4] loses rank (3a + 1) % WORLD_SIZE at global step
-- 2 + 3a, by exit 3 or (odd a) SIGKILL; 96 samples, so 4 ranks make 6 steps an epoch.
-- Rank 0 prints "R0 attempt=<DPL_RESTART_COUNT> epochs=<n> <weights>".
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local mode, dir = arg[1], arg[2]
local attempt = tonumber(os.getenv('DPL_RESTART_COUNT'))

local M = dpl.LightningModule:extend('Restart')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.25), nn.Linear(8, 3))
end
function M:forward(x) return self.net(x) end
local world = tonumber(os.getenv('WORLD_SIZE'))
function M:training_step(batch, i)
  if mode == 'chaos' then
    if attempt < tonumber(arg[4]) and self.global_rank == (3 * attempt + 1) % world
        and self.global_step == 2 + 3 * attempt then
      if attempt % 2 == 1 then os.execute('kill -9 $PPID; sleep 5') end -- ($PPID: this rank)
      os.exit(3, true) -- (true: the state closes, so a sanitizer build sees no leak)
    end
  elseif mode ~= 'straight' and self.global_rank == 1 and self.current_epoch == 1 and i == 2
      and (mode == 'always' or attempt == 0) then
    os.exit(3, true)
  end
  return F.cross_entropy(self(batch[1]), batch[2])
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end

dpl.manual_seed(1)
local ds = dpl.data.TensorDataset(dpl.randn({ 96, 4 }), dpl.randint(1, 4, { 96 }))
local starts = 0
local Count = dpl.callbacks.Callback:extend('Count')
function Count:on_train_epoch_start() starts = starts + 1 end
local t = dpl.Trainer{ strategy = 'ddp', max_epochs = 3, enable_progress_bar = false, enable_model_summary = false,
  logger = false, deterministic = true, default_root_dir = dir,
  callbacks = { dpl.callbacks.ModelCheckpoint{ dirpath = dir, save_last = true,
    every_n_train_steps = arg[3] == 'steps' and 1 or nil }, Count() } }
local m = M()
if t.global_rank == 1 then dpl.manual_seed(1234) end -- (the ranks draw different dropout masks)
t:fit(m, dpl.data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 5 }), nil,
  { ckpt_path = mode ~= 'straight' and 'last' or nil })
local th = require 'spec.support.trainer_helpers'
if t.global_rank == 0 then print(('R0 attempt=%s epochs=%d %s'):format(tostring(attempt), starts, th.flat_params(m))) end
