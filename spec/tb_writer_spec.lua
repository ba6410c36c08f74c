-- tb_writer_spec.lua: logger.experiment — TensorBoardLogger's SummaryWriter (dpl.loggers.tb_writer:
-- scalars, add_scalars' runs, histograms, images, text, the NotImplementedError stubs, the dummy
-- of other ranks) and CSVLogger's ExperimentWriter; histograms and images against what
-- torch.utils.tensorboard writes for the same tensors (the literals below); the files read back
-- by spec/support/tb_events.lua and, when a python here imports tensorboard, by its
-- EventAccumulator; a fit on Fashion-MNIST writing through self.logger.experiment, also under
-- dplhost --nproc 2 (only rank 0 writes).
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'
local tb = require 'spec.support.tb_events'
local W = require 'dpl.loggers.tb_writer'

-- What torch.utils.tensorboard (torch 1.13, numpy 1.24, PIL) writes for the inputs below: printed
-- by spec/fixtures/gen_tb_writer_ref.py (run it with build/plref/bin/python to regenerate).
-- Histograms: summary.histogram with SummaryWriter's default bins; images: the pixels of the PNG
-- summary.image encodes, decoded by PIL; text/scalars: the serialized Summary.
local REF = {
  A_tf = { min = 0.5, max = 1.992537260055542, num = 60.0, sum = 74.34328335523605, sum_squares = 103.47181933000272,
    bucket_limit = { 0.47069243095356195, 0.5177616740489182, 0.56953784145381, 0.6264916255991911, 0.6891407881591103, 0.7580548669750213, 0.8338603536725235, 0.917246389039776, 1.0089710279437536, 1.109868130738129, 1.220854943811942, 1.3429404381931362, 1.47723448201245, 1.624957930213695, 1.7874537232350647, 1.9661990955585713, 2.1628190051144287 },
    bucket = { 0.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 5.0, 5.0, 6.0, 7.0, 7.0, 1.0 } },
  B_tf = { min = -5.977612018585205, max = -1.5, num = 60.0, sum = -223.02985179424286, sum_squares = 931.246390434251,
    bucket_limit = { -6.1707750357841915, -5.609795487076537, -5.099814079160488, -4.636194617418625, -4.214722379471477, -3.8315657995195243, -3.48324163592684, -3.1665833053880363, -2.8787120958073054, -2.6170109961884593, -2.379100905625872, -2.1628190051144287, -1.9661990955585713, -1.7874537232350647, -1.624957930213695, -1.47723448201245 },
    bucket = { 0.0, 5.0, 6.0, 6.0, 6.0, 5.0, 5.0, 4.0, 4.0, 4.0, 3.0, 3.0, 2.0, 2.0, 3.0, 2.0 } },
  A_5 = { min = 0.5, max = 1.992537260055542, num = 60.0, sum = 74.34328335523605, sum_squares = 103.47181933000272,
    bucket_limit = { 0.5, 0.7985074520111084, 1.0970149040222168, 1.3955223560333252, 1.6940298080444336, 1.992537260055542 },
    bucket = { 0.0, 12.0, 12.0, 12.0, 12.0, 12.0 } },
  D_3 = { min = 2.0, max = 2.0, num = 4.0, sum = 8.0, sum_squares = 16.0,
    bucket_limit = { 1.8333333333333333, 2.1666666666666665 },
    bucket = { 0.0, 4.0 } },
  A_tf_max4 = { min = 0.5, max = 1.992537260055542, num = 60.0, sum = 74.34328335523605, sum_squares = 103.47181933000272,
    bucket_limit = { 0.0, 9496.782049180354 },
    bucket = { 0.0, 60.0 } },
  G_tf = { min = 1.0, max = 10.0, num = 10.0, sum = 55.0, sum_squares = 385.0,
    bucket_limit = { 0.917246389039776, 1.0089710279437536, 1.109868130738129, 1.220854943811942, 1.3429404381931362, 1.47723448201245, 1.624957930213695, 1.7874537232350647, 1.9661990955585713, 2.1628190051144287, 2.379100905625872, 2.6170109961884593, 2.8787120958073054, 3.1665833053880363, 3.48324163592684, 3.8315657995195243, 4.214722379471477, 4.636194617418625, 5.099814079160488, 5.609795487076537, 6.1707750357841915, 6.7878525393626115, 7.466637793298873, 8.213301572628762, 9.034631729891638, 9.938094902880803, 10.931904393168884 },
    bucket = { 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0 } },
  E_tf = { n = 603, first = -2.1628190051144287, last = 3.1665833053880363, total = 6.0, nonzero = { { -1.9661990955585713, 1.0 }, { -0.0009598705768327891, 1.0 }, { 1e-12, 2.0 }, { 1.0044754989265568e-06, 1.0 }, { 3.1665833053880363, 1.0 } }, min = -2.0, max = 3.0 },
  images = {
    f1 = { height = 2, width = 2, colorspace = 3, pixels = { 0, 128, 3, 1, 200, 77, 51, 254, 99, 127, 255, 180 } },
    u2 = { height = 2, width = 3, colorspace = 4, pixels = { 0, 29, 58, 87, 116, 145, 174, 203, 232, 5, 34, 63, 92, 121, 150, 179, 208, 237, 10, 39, 68, 97, 126, 155 } },
    f3 = { height = 2, width = 2, colorspace = 3, pixels = { 0, 0, 0, 63, 63, 63, 127, 127, 127, 255, 255, 255 } },
    f4 = { height = 2, width = 3, colorspace = 3, pixels = { 25, 25, 25, 51, 51, 51, 76, 76, 76, 178, 178, 178, 229, 229, 229, 254, 254, 254 } },
    n5 = { height = 2, width = 6, colorspace = 3, pixels = { 0, 0, 0, 23, 23, 23, 92, 92, 92, 115, 115, 115, 185, 185, 185, 208, 208, 208, 46, 46, 46, 69, 69, 69, 139, 139, 139, 162, 162, 162, 231, 231, 231, 255, 255, 255 } },
    n6 = { height = 2, width = 8, colorspace = 3, pixels = { 25, 25, 25, 51, 51, 51, 76, 76, 76, 102, 102, 102, 127, 127, 127, 153, 153, 153, 178, 178, 178, 204, 204, 204, 229, 229, 229, 255, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 } },
  },
  text = "\010\059\010\017\110\111\116\101\047\116\101\120\116\095\115\117\109\109\097\114\121\066\028\008\007\018\004\018\002\008\001\066\018\104\101\108\108\111\032\042\042\119\111\114\108\100\042\042\032\195\169\074\008\010\006\010\004\116\101\120\116",
  scalar = "\010\011\010\004\108\111\115\115\021\205\204\204\061",
  scalar_new = "\010\029\010\004\108\111\115\115\066\008\008\001\042\004\205\204\204\061\074\011\010\009\010\007\115\099\097\108\097\114\115",
  scalar_double = "\010\033\010\004\108\111\115\115\066\012\008\002\050\008\154\153\153\153\153\153\185\063\074\011\010\009\010\007\115\099\097\108\097\114\115",
  histo_A_tf = "\010\201\002\010\001\104\042\195\002\009\000\000\000\000\000\000\224\063\017\000\000\000\192\110\225\255\063\025\000\000\000\000\000\000\078\064\033\000\000\192\090\248\149\082\064\041\222\254\179\073\050\222\089\064\050\136\001\250\229\090\037\211\031\222\063\176\049\037\238\128\145\224\063\015\029\092\108\167\057\226\063\043\083\101\042\056\012\228\063\022\117\111\251\112\013\230\063\050\103\199\071\252\065\232\063\030\139\142\232\251\174\234\063\008\153\105\025\021\090\237\063\043\020\250\205\190\036\240\063\099\073\198\021\005\194\241\063\186\080\141\049\159\136\243\063\051\063\232\028\175\124\245\063\133\069\204\159\192\162\247\063\121\076\250\226\211\255\249\063\083\135\070\019\105\153\252\063\220\148\205\046\141\117\255\063\224\017\241\012\116\077\001\064\058\136\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\240\063\000\000\000\000\000\000\000\064\000\000\000\000\000\000\000\064\000\000\000\000\000\000\008\064\000\000\000\000\000\000\008\064\000\000\000\000\000\000\008\064\000\000\000\000\000\000\008\064\000\000\000\000\000\000\016\064\000\000\000\000\000\000\016\064\000\000\000\000\000\000\016\064\000\000\000\000\000\000\020\064\000\000\000\000\000\000\020\064\000\000\000\000\000\000\024\064\000\000\000\000\000\000\028\064\000\000\000\000\000\000\028\064\000\000\000\000\000\000\240\063",
}

-- the same inputs as gen_tb_writer_ref.py
local A, B = {}, {}
for i = 0, 59 do A[#A + 1] = 0.5 + ((i * 37) % 101) / 67; B[#B + 1] = -3 * A[#A] end
local E = { -2, -1e-3, 0, 0, 1e-6, 3 }
local function f32(list) return dpl.tensor(list) end
local K = { 0, 1, 51, 127, 128, 200, 254, 255, 3, 77, 99, 180 }
local function images()
  local kf, u, n5, n6 = {}, {}, {}, {}
  for i, k in ipairs(K) do kf[i] = k / 255 end
  for i = 0, 23 do u[#u + 1] = (i * 29) % 256 end
  for i = 0, 11 do n5[#n5 + 1] = i / 11 end
  for i = 0, 9 do n6[#n6 + 1] = (i + 1) / 10 end
  return {
    f1 = { f32(kf):reshape(3, 2, 2), 'CHW' },
    u2 = { dpl.tensor(u, { dtype = 'uint8' }):reshape(2, 3, 4), 'HWC' },
    f3 = { f32({ { 0, 0.25 }, { 0.5, 1 } }), 'HW' },
    f4 = { dpl.tensor({ 0.1, 0.2, 0.3, 0.7, 0.9, 0.999 }, { dtype = 'float64' }):reshape(1, 2, 3), 'CHW' },
    n5 = { f32(n5):reshape(3, 1, 2, 2), 'NCHW' },
    n6 = { f32(n6):reshape(10, 1, 1, 1), 'NCHW' },
  }
end

local function hist_of(t, bins, max_bins)
  local vals = t:double():totable()
  local flat = {}
  local function walk(x) if type(x) == 'table' then for _, y in ipairs(x) do walk(y) end else flat[#flat + 1] = x end end
  walk(vals)
  local buf = require('ffi').new('double[?]', #flat)
  for i, v in ipairs(flat) do buf[i - 1] = v end
  return W.make_histogram(buf, #flat, bins, max_bins)
end

local function same_histogram(ref, got, name)
  assert.same(ref.bucket_limit, got.bucket_limit, name)
  assert.same(ref.bucket, got.bucket, name)
  assert.equal(ref.min, got.min, name)
  assert.equal(ref.max, got.max, name)
  assert.equal(ref.num, got.num, name)
  -- numpy sums pairwise (and dot() through BLAS), here in order: equal to rounding
  assert.is_true(math.abs(ref.sum - got.sum) <= 1e-12 * math.max(1, math.abs(ref.sum)), name .. ' sum')
  assert.is_true(math.abs(ref.sum_squares - got.sum_squares) <= 1e-12 * math.max(1, ref.sum_squares), name .. ' sum_squares')
end

local function one_event_file(dir)
  local files = tb.event_files(dir)
  assert.equal(1, #files, dir)
  return files[1]
end

local function all_values(path)
  local out = { scalars = {}, histos = {}, images = {}, tensors = {}, plugins = {}, steps = {} }
  for _, ev in ipairs(tb.read_events(path)) do
    local seen = {}
    for _, kind in ipairs({ 'scalars', 'histos', 'images', 'tensors', 'plugins' }) do
      for tag, v in pairs(ev[kind]) do
        out[kind][tag] = out[kind][tag] or {}
        table.insert(out[kind][tag], v)
        if not seen[tag] then
          seen[tag] = true
          out.steps[tag] = out.steps[tag] or {}
          table.insert(out.steps[tag], ev.step)
        end
      end
    end
  end
  return out
end

describe('TensorBoard summaries as torch.utils.tensorboard writes them', function()
  it('histograms: the default "tensorflow" bins, a number of bins, max_bins, integers, values across 0', function()
    same_histogram(REF.A_tf, hist_of(f32(A)), 'A_tf')
    same_histogram(REF.B_tf, hist_of(f32(B)), 'B_tf')
    same_histogram(REF.A_5, hist_of(f32(A), 5), 'A_5')
    same_histogram(REF.D_3, hist_of(f32({ 2, 2, 2, 2 }), 3), 'D_3')
    same_histogram(REF.A_tf_max4, hist_of(f32(A), 'tensorflow', 4), 'A_tf_max4')
    same_histogram(REF.G_tf, hist_of(dpl.arange(1, 11)), 'G_tf')
    assert.equal('int64', dpl.arange(1, 11).dtype)
    local e = hist_of(f32(E))
    assert.equal(REF.E_tf.n, #e.bucket_limit)
    assert.equal(REF.E_tf.first, e.bucket_limit[1])
    assert.equal(REF.E_tf.last, e.bucket_limit[#e.bucket_limit])
    local nz, total = {}, 0
    for i, c in ipairs(e.bucket) do
      total = total + c
      if c > 0 then nz[#nz + 1] = { e.bucket_limit[i], c } end
    end
    assert.equal(REF.E_tf.total, total)
    assert.same(REF.E_tf.nonzero, nz)
    assert.same({ REF.E_tf.min, REF.E_tf.max }, { e.min, e.max })
    -- the default edges: SummaryWriter's list (1549 edges, 0 in the middle)
    local bins = W.default_bins()
    assert.equal(1549, #bins)
    assert.equal(0, bins[775])
    assert.equal(1e-12, bins[776])
    assert.equal(-bins[#bins], bins[1])
    -- the encoded HistogramProto, byte for byte (torch's sums put in: they are summed differently)
    assert.equal(REF.histo_A_tf, W.histogram_summary('h', REF.A_tf))
  end)

  it('text and scalars (simple_value, new_style, double_precision), byte for byte', function()
    assert.equal(REF.text, W.text_summary('note', 'hello **world** \195\169'))
    assert.equal(REF.scalar, W.scalar_summary('loss', 0.1))
    assert.equal(REF.scalar_new, W.scalar_summary('loss', 0.1, true))
    assert.equal(REF.scalar_double, W.scalar_summary('loss', 0.1, true, true))
  end)

  it('images: the pixels torch writes (scaling, CHW/HWC/HW, one channel as RGB, the grid of add_images)', function()
    for name, case in pairs(images()) do
      local ref = REF.images[name]
      local px, hh, w, c = W.image_pixels(case[1], case[2])
      assert.same({ ref.height, ref.width, ref.colorspace }, { hh, w, c }, name)
      local got = {}
      for i = 0, hh * w * c - 1 do got[#got + 1] = px[i] end
      assert.same(ref.pixels, got, name)
      -- and through the PNG encoder and an independent decoder (zlib)
      local png = tb.png(require('dpl.loggers.png').encode(w, hh, c, px))
      assert.same({ w, hh, c }, { png.width, png.height, png.channels })
      if tb.have_zlib then assert.same(ref.pixels, png.pixels, name) end
    end
  end)

  it('PNG: checksums, several stored blocks, linear in the size', function()
    local png = require 'dpl.loggers.png'
    assert.equal(0xCBF43926, png.crc32('123456789'))
    assert.equal(0x11E60398, png.adler32('Wikipedia'))
    -- 300 x 300 RGB: 270,300 bytes of scanlines, five stored blocks
    local ffi = require 'ffi'
    local px = ffi.new('uint8_t[?]', 300 * 300 * 3)
    for i = 0, 300 * 300 * 3 - 1 do px[i] = (i * 7) % 251 end
    local t0 = os.clock()
    local s = png.encode(300, 300, 3, px)
    assert.is_true(os.clock() - t0 < 2)
    local d = tb.png(s)
    assert.same({ 300, 300, 3 }, { d.width, d.height, d.channels })
    if tb.have_zlib then
      for _, i in ipairs({ 0, 1, 12345, 300 * 300 * 3 - 1 }) do assert.equal((i * 7) % 251, d.pixels[i + 1]) end
    end
    assert.has_error(function() png.encode(0, 1, 3, '') end, 'png.encode: width must be a positive integer, got 0')
    assert.has_error(function() png.encode(1, 1, 5, 'x') end, 'png.encode: channels must be 1, 2, 3 or 4, got 5')
  end)
end)

describe('TensorBoardLogger.experiment', function()
  it('writes every kind into the logger\'s event file; add_scalars into a run per tag', function()
    local dir = th.tmpdir()
    local lg = dpl.loggers.TensorBoardLogger{ save_dir = dir }
    lg:log_metrics({ loss = 0.25 }, 1)
    local e = lg.experiment
    assert.equal(e, lg.experiment)
    assert.equal(lg.log_dir, e.log_dir)
    assert.equal(lg.log_dir, e:get_logdir())
    e:add_scalar('s', 0.5, 3, 1000.25)
    e:add_scalar('t', dpl.tensor(2), 4, { new_style = true })
    e:add_scalars('grp/x', { a = 1, b = dpl.tensor({ 2 }) }, 5)
    e:add_histogram('h', f32(A), 6)
    e:add_histogram('h5', f32(A), 6, 5)
    e:add_histogram('hl', { 1, 2, 3 }, 6, { 0, 1.5, 4 })
    e:add_histogram('hm', f32(A), 6, { max_bins = 4, walltime = 5 })
    e:add_histogram_raw('raw', 0, 2, 3, 3, 5, { 1, 2 }, { 1, 2 }, 6)
    local im = images()
    e:add_image('f1', im.f1[1], 7)
    e:add_image('u2', im.u2[1], 7, { dataformats = 'HWC' })
    e:add_image('f3', im.f3[1], 7, nil, 'HW')
    e:add_images('n6', im.n6[1], 7)
    e:add_text('note', 'hello **world** \195\169', 8)
    lg:log_metrics({ loss = 0.125 }, 9)
    lg:finalize()
    local vdir = dir .. '/lightning_logs/version_0'
    local got = all_values(one_event_file(vdir))
    assert.same({ 0.25, 0.125 }, got.scalars.loss)
    assert.same({ 1, 9 }, got.steps.loss)
    assert.same({ 0.5 }, got.scalars.s)
    assert.same({ 3 }, got.steps.s)
    for _, ev in ipairs(tb.read_events(one_event_file(vdir))) do
      if ev.scalars.s then assert.equal(1000.25, ev.wall_time) end
      if ev.histos.hm then assert.equal(5, ev.wall_time) end
    end
    assert.same({ 2 }, got.tensors.t[1].float_val)
    assert.equal('scalars', got.plugins.t[1].name)
    same_histogram(REF.A_tf, got.histos.h[1], 'h')
    same_histogram(REF.A_5, got.histos.h5[1], 'h5')
    same_histogram(REF.A_tf_max4, got.histos.hm[1], 'hm')
    assert.same({ 0, 1.5, 4 }, got.histos.hl[1].bucket_limit)
    assert.same({ 0, 1, 2 }, got.histos.hl[1].bucket)
    assert.same({ 1, 2 }, got.histos.raw[1].bucket_limit)
    assert.same({ 6 }, got.steps.raw)
    for _, name in ipairs({ 'f1', 'u2', 'f3', 'n6' }) do
      local img, ref = got.images[name][1], REF.images[name]
      assert.same({ ref.height, ref.width, ref.colorspace }, { img.height, img.width, img.colorspace }, name)
      local d = tb.png(img.png)
      if tb.have_zlib then assert.same(ref.pixels, d.pixels, name) end
    end
    local txt = got.tensors['note/text_summary'][1]
    assert.same({ 7, { 1 }, { 'hello **world** \195\169' } }, { txt.dtype, txt.shape, txt.string_val })
    assert.equal('text', got.plugins['note/text_summary'][1].name)
    assert.same({ 8 }, got.steps['note/text_summary'])
    -- add_scalars: <log_dir>/grp_x_a and grp_x_b, each with the tag grp/x
    local a = all_values(one_event_file(vdir .. '/grp_x_a'))
    local b = all_values(one_event_file(vdir .. '/grp_x_b'))
    assert.same({ { 1 }, { 5 } }, { a.scalars['grp/x'], a.steps['grp/x'] })
    assert.same({ { 2 }, { 5 } }, { b.scalars['grp/x'], b.steps['grp/x'] })

    -- Python's tensorboard reads the same files, when a python here has it
    local py = tb.python()
    if not py then
      print('\n(skipped: no python here can import tensorboard; the Lua decoder checked the files)')
      return
    end
    local script = h.write_file(h.tmpname('.py'), [=[
import sys, io, zlib, struct
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E
from tensorboard.util import tensor_util
d = sys.argv[1]
e = E(d, size_guidance={'histograms': 0, 'images': 0, 'tensors': 0, 'scalars': 0}); e.Reload()
t = e.Tags()
print('scalars', sorted(t['scalars']), [(x.step, x.value) for x in e.Scalars('s')])
print('histograms', sorted(t['histograms']))
hv = e.Histograms('h')[0].histogram_value
print('h', hv.num, hv.min, hv.max, len(hv.bucket_limit), list(hv.bucket_limit[:2]), list(hv.bucket[:3]))
for tag in ['f1', 'u2', 'f3', 'n6']:
    im = e.Images(tag)[0]
    s = im.encoded_image_string
    try:
        from PIL import Image
        a = list(Image.open(io.BytesIO(s)).tobytes())
    except ImportError:  # zlib and the IHDR instead
        w, h, bd, ct = struct.unpack('>IIBB', s[16:26])
        raw = zlib.decompress(s[s.index(b'IDAT') + 4:-16])
        row = len(raw) // h
        a = [b for y in range(h) for b in raw[y * row + 1:(y + 1) * row]]
    print('image', tag, im.width, im.height, im.step, a)
print('text', tensor_util.make_ndarray(e.Tensors('note/text_summary')[0].tensor_proto).tolist()[0].decode())
print('t', sorted(t['tensors']))
e2 = E(d + '/grp_x_b'); e2.Reload()
print('grp', [(x.step, x.value) for x in e2.Scalars('grp/x')])
]=])
    local out, err, rc = h.sh(h.q(py) .. ' ' .. h.q(script) .. ' ' .. h.q(vdir) .. ' 2>&1')
    os.remove(script)
    assert.equal(0, rc, out .. err)
    assert.matches("scalars %['loss', 's'%] %[%(3, 0%.5%)%]", out)
    assert.matches("histograms %['h', 'h5', 'hl', 'hm', 'raw'%]", out)
    assert.matches('h 60.0 0.5 1.992537260055542 17 %[0.47069243095356195, 0.5177616740489182%] %[0.0, 1.0, 2.0%]', out)
    for name, ref in pairs(REF.images) do
      if name ~= 'n5' and name ~= 'f4' then
        local want = ('image %s %d %d 7 [%s]'):format(name, ref.width, ref.height, table.concat(ref.pixels, ', '))
        assert.is_truthy(out:find(want, 1, true), want .. '\n' .. out)
      end
    end
    assert.is_truthy(out:find('text hello **world** \195\169', 1, true), out)
    assert.matches("t %['note/text_summary', 't'%]", out)
    assert.matches('grp %[%(5, 2%.0%)%]', out)
  end)

  it('flush, close (a later add opens a new file, as torch\'s), finalize closes add_scalars\' runs', function()
    local dir = th.tmpdir()
    local lg = dpl.loggers.TensorBoardLogger{ save_dir = dir, max_queue = 2 }
    local e = lg.experiment
    e:add_scalar('a', 1, 1)
    assert.same({}, tb.event_files(lg.log_dir)) -- waiting (max_queue 2)
    e:add_scalar('a', 2, 2)
    local f = one_event_file(lg.log_dir) -- flushed at max_queue
    assert.same({ 1, 2 }, all_values(f).scalars.a)
    e:add_scalar('a', 3, 3)
    e:flush()
    assert.same({ 1, 2, 3 }, all_values(f).scalars.a)
    e:close()
    e:add_scalar('a', 4, 4)
    e:add_scalars('m', { x = 1 }, 4)
    lg:finalize()
    local files = tb.event_files(lg.log_dir)
    assert.equal(2, #files)
    assert.same({ 4 }, all_values(files[2]).scalars.a)
    assert.same({ 1 }, all_values(one_event_file(lg.log_dir .. '/m_x')).scalars.m)
  end)

  it('refuses bad arguments, naming them; NotImplementedError for what it does not write', function()
    local lg = dpl.loggers.TensorBoardLogger{ save_dir = th.tmpdir() }
    local e = lg.experiment
    for _, name in ipairs({ 'add_graph', 'add_embedding', 'add_audio', 'add_figure', 'add_video', 'add_pr_curve',
        'add_mesh', 'add_hparams', 'add_custom_scalars', 'add_onnx_graph', 'add_image_with_boxes' }) do
      local ok, err = pcall(e[name], e, 'x')
      assert.is_false(ok)
      assert.matches('^NotImplementedError: SummaryWriter%.' .. name .. ' is not implemented', tostring(err))
    end
    local function raises(f, text) h.raises(f, text) end
    raises(function() e:add_scalar(1, 2) end, 'TypeError: add_scalar: tag must be a string, got number')
    raises(function() e:add_scalar('a', 'x') end, 'add_scalar: scalar_value must be a number or a one-element tensor, got string')
    raises(function() e:add_scalar('a', dpl.tensor({ 1, 2 })) end, 'a tensor of one element is needed, got 2 elements')
    raises(function() e:add_scalar('a', 1, -1) end, 'global_step must be nil or a non-negative integer, got -1')
    raises(function() e:add_scalar('a', 1, 1.5) end, 'global_step must be nil or a non-negative integer, got 1.5')
    raises(function() e:add_scalar('a', 1, 1, { wall = 3 }) end, "add_scalar() got an unexpected option 'wall' (it takes double_precision, new_style, walltime)")
    raises(function() e:add_scalar('a', 1, 1, 'now') end, 'add_scalar(): walltime must be a number')
    raises(function() e:add_scalars('a', 3) end, 'add_scalars: tag_scalar_dict must be a table of tag = value, got number')
    raises(function() e:add_histogram('h', {}) end, 'ValueError: add_histogram: the input has no element')
    raises(function() e:add_histogram('h', { 1, 0 / 0 }) end, 'add_histogram: the values must be finite, got nan')
    raises(function() e:add_histogram('h', { 1 }, 0, 'auto') end, "NotImplementedError: add_histogram: bins='auto'")
    raises(function() e:add_histogram('h', { 1 }, 0, 0) end, 'add_histogram: bins must be a positive integer, got 0')
    raises(function() e:add_histogram('h', { 1 }, 0, { 2, 1 }) end, 'add_histogram: bins must increase monotonically (edge 2)')
    raises(function() e:add_histogram('h', { 5 }, 0, { 0, 1 }) end, 'no value falls within the bins')
    raises(function() e:add_histogram('h', 'x') end, 'add_histogram: values must be a tensor or a list of numbers, got string')
    raises(function() e:add_image('i', { 1 }) end, 'TypeError: img_tensor must be a tensor, got table')
    raises(function() e:add_image('i', dpl.zeros(3, 2, 5), 0, { dataformats = 'HWC' }) end, 'an image has 1 to 4 channels, got 5')
    raises(function() e:add_image('i', dpl.zeros(2, 2), 0) end, "the image has 2 dimensions but dataformats 'CHW' names 3")
    raises(function() e:add_image('i', dpl.zeros(2, 2), 0, { dataformats = 'HH' }) end, "dataformats 'HH' uses H twice")
    raises(function() e:add_images('i', dpl.zeros(2, 4, 2, 2), 0) end, "add_images: the images must have 1 or 3 channels (torch's make_grid), got 4")
    raises(function() e:add_text('t', 3) end, 'add_text: text_string must be a string, got number')
    raises(function() e:add_histogram_raw('r', 0, 1, 1, 1, 1, { 1 }, { 1, 2 }) end, 'len(bucket_limits) != len(bucket_counts)')
    assert.same({}, tb.event_files(lg.log_dir or '/nonexistent')) -- nothing was written
  end)

  it('on a rank other than 0: a dummy whose methods do nothing (Lightning\'s rank_zero_experiment)', function()
    local dir = th.tmpdir()
    local code = ([[
      package.path = %q .. '/?.lua;' .. package.path
      local dpl = require 'dpl'
      for _, lg in ipairs({ dpl.loggers.TensorBoardLogger{ save_dir = %q }, dpl.loggers.CSVLogger{ save_dir = %q } }) do
        local e = lg.experiment
        e:add_scalar('a', 1, 1); e:add_image('i', dpl.zeros(3, 2, 2)); e:log_metrics({ a = 1 }); e:save()
        e[1]:add_text('t', 'x'); e.anything = 3
        print(tostring(e), tostring(e[1]), type(e.log_dir), lg.experiment == e)
      end
    ]]):format(h.root, dir, dir)
    local out, err, rc = h.run_chunk(code, 'RANK=1')
    assert.equal(0, rc, err)
    assert.equal('DummyExperiment\tDummyExperiment\tfunction\ttrue\n', out:match('[^\n]*\n'))
    local p = io.popen('find ' .. h.q(dir) .. ' -type f')
    assert.equal('', p:read('*a'))
    p:close()
  end)
end)

describe('CSVLogger.experiment (Lightning\'s ExperimentWriter)', function()
  it('log_metrics, log_hparams, save, metrics, metrics_file_path over the logger\'s rows and files', function()
    local dir = th.tmpdir()
    local lg = dpl.loggers.CSVLogger{ save_dir = dir, prefix = 'p' }
    lg:log_hyperparams({ lr = 0.1 })
    lg:log_metrics({ a = 1 }, 0)
    local e = lg.experiment
    assert.equal(e, lg.experiment)
    assert.equal(lg.log_dir, e.log_dir)
    assert.equal(lg:metrics_file_path(), e.metrics_file_path)
    e:log_metrics({ b = 2, a = dpl.tensor(3) }) -- step: the number of rows so far (1); no prefix
    e:log_metrics({ c = 4 }, 7)
    assert.equal(3, #e.metrics)
    assert.same({ b = 2, a = 3, step = 1 }, e.metrics[2])
    e:log_hparams({ bs = 4 })
    assert.equal('lr: 0.1\n', h.read_all(e.log_dir .. '/hparams.yaml')) -- written by save()
    e:save()
    -- Lightning's header: the keys in first-appearance order over the rows
    -- (numbers as Python floats, an integer tensor's item() and step as ints)
    assert.equal('p-a,step,a,b,c\n1.0,0,,,\n,1,3,2.0,\n,7,,,4.0\n', h.read_all(e.metrics_file_path))
    assert.equal('bs: 4\nlr: 0.1\n', h.read_all(e.log_dir .. '/hparams.yaml'))
    -- the logger goes on from there
    lg:log_metrics({ a = 5 }, 8)
    lg:save()
    assert.equal('5.0,8,,,\n', h.read_all(e.metrics_file_path):match('[^\n]*\n$'))
    h.raises(function() e:log_metrics(3) end, 'log_metrics: metrics_dict must be a table of name = value, got number')
    h.raises(function() e:log_hparams('x') end, 'log_hparams: params must be a table, got string')
    -- a subclass keeps the property
    local Sub = dpl.loggers.CSVLogger:extend('SubCSV')
    local s = Sub{ save_dir = dir, name = 'sub' }
    assert.equal(s.log_dir, s.experiment.log_dir)
  end)
end)

describe('self.logger.experiment in a LightningModule', function()
  local script = require 'spec.support.tb_experiment_script'

  local function check_run(vdir)
    local got = all_values(one_event_file(vdir))
    -- the first batch (8 Fashion-MNIST images, 1x28x28): one grid of 8 across, and its first image
    local grid = got.images.first_batch[1]
    assert.same({ 28, 224, 3 }, { grid.height, grid.width, grid.colorspace })
    local d = tb.png(grid.png)
    assert.same({ 224, 28, 3 }, { d.width, d.height, d.channels })
    local one = got.images.first_image[1]
    assert.same({ 28, 28, 3 }, { one.height, one.width, one.colorspace })
    -- the weight's histogram at each of the 3 steps, with the logged loss next to it
    assert.same({ 0, 1, 2 }, got.steps['fc.weight'])
    for _, hst in ipairs(got.histos['fc.weight']) do
      assert.equal(7840, hst.num)
      local n = 0
      for _, c in ipairs(hst.bucket) do n = n + c end
      assert.equal(7840, n)
    end
    assert.equal(3, #got.scalars.train_loss)
    return got
  end

  it('a fit on Fashion-MNIST logs an image of its first batch and a weight histogram', function()
    local dir = th.tmpdir()
    local t, m = script.fit(dir)
    assert.equal(3, t.global_step)
    local got = check_run(dir .. '/lightning_logs/version_0')
    assert.same({ 'rank 0' }, got.tensors['rank/text_summary'][1].string_val)
    if tb.have_zlib then
      -- the grid's first cell is the first image of the batch, as torch scales it
      local d = tb.png(got.images.first_batch[1].png)
      local px1 = tb.png(got.images.first_image[1].png).pixels
      for y = 0, 27 do
        for x = 0, 27 do
          assert.equal(px1[(y * 28 + x) * 3 + 1], d.pixels[(y * 224 + x) * 3 + 1])
        end
      end
    end
    -- and Python's tensorboard sees it
    local py = tb.python()
    if py then
      local out, err, rc = h.sh(h.q(py) .. ' -c "'
        .. 'from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E;'
        .. 'e=E(\'' .. dir .. '/lightning_logs/version_0\', size_guidance={\'histograms\': 0});e.Reload();t=e.Tags();'
        .. 'print(t[\'images\'], t[\'histograms\'], [(x.width, x.height) for x in e.Images(\'first_batch\')],'
        .. '[x.step for x in e.Histograms(\'fc.weight\')])"')
      assert.equal(0, rc, err)
      assert.matches("%['first_batch', 'first_image'%] %['fc.weight'%] %[%(224, 28%)%] %[0, 1, 2%]", out)
    else
      print('\n(skipped: no python here can import tensorboard)')
    end
  end)

  it('under dplhost --nproc 2 (ddp) only rank 0 writes', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/tb_experiment_script.lua ' .. h.q(dir) .. ' ddp', { timeout = 180 })
    assert.equal(0, rc, err)
    assert.is_truthy(out:find('rank 0 steps 3', 1, true), out)
    assert.is_truthy(out:find('rank 1 steps 3', 1, true), out)
    local p = io.popen('cd ' .. h.q(dir) .. ' && find . -type f | sort')
    local files = p:read('*a'); p:close()
    assert.matches('^%./lightning_logs/version_0/events%.out%.tfevents%.[^\n]+\n%./lightning_logs/version_0/hparams%.yaml\n$', files)
    local got = check_run(dir .. '/lightning_logs/version_0')
    assert.equal(1, #got.tensors['rank/text_summary'])
    assert.same({ 'rank 0' }, got.tensors['rank/text_summary'][1].string_val)
  end)

  it('under dplhost --nproc 2, loggers called directly on every rank write on rank 0 only (rank_zero_only)', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/tb_experiment_script.lua ' .. h.q(dir) .. ' ddp direct',
      { timeout = 180 })
    assert.equal(0, rc, err)
    local p = io.popen('cd ' .. h.q(dir) .. ' && find . -type f | sort')
    local files = p:read('*a'); p:close()
    -- (rank 1 wrote an events file of its own, and its hparams and metrics over rank 0's)
    assert.matches('^%./csv/version_0/hparams%.yaml\n%./csv/version_0/metrics%.csv\n'
      .. '%./lightning_logs/version_0/events%.out%.tfevents%.[^\n]+\n%./lightning_logs/version_0/hparams%.yaml\n'
      .. '%./tb/version_0/events%.out%.tfevents%.[^\n]+\n%./tb/version_0/hparams%.yaml\n$', files)
    assert.matches('rank: 0', h.read_all(dir .. '/csv/version_0/hparams.yaml'))
    assert.matches('rank: 0', h.read_all(dir .. '/tb/version_0/hparams.yaml'))
    assert.matches('direct,step\n0%.0,99\n$', h.read_all(dir .. '/csv/version_0/metrics.csv'))
    check_run(dir .. '/lightning_logs/version_0')
    local got = all_values(one_event_file(dir .. '/tb/version_0'))
    assert.equal(1, #got.scalars.direct)
  end)
end)
