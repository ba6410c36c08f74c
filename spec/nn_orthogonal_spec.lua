-- nn_orthogonal_spec.lua: nn.utils.parametrizations.orthogonal (lua/dpl/nn/utils_param.lua)
-- and the Householder tools under it (dpl.linalg.geqrf, householder_product / t:orgqr, ormqr)
-- against PyTorch 1.13: the values below come from torch 1.13 in float64 (the same weights,
-- torch.geqrf / householder_product / ormqr of a fixed 5x3 matrix; for each orthogonal_map and
-- use_trivialization, Linear(3, 3)'s parametrized weight, its `original` and the gradient of
-- sum(m(x)) for x = [[1, 2, 3]]).
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local la = dpl.linalg
local P = dpl.nn.utils.parametrizations
local f64 = { dtype = 'float64' }
local function T(v) return dpl.tensor(v, f64) end
local function maxdiff(a, b) return (a - b):abs():max():item() end

describe('geqrf, householder_product, ormqr', function()
  local A = T({{1.5409961082440433, -0.2934289057609464, -2.1787893820745574}, {0.5684312772806678, -1.084522342424021, -1.3985953953708767}, {0.4033468476292993, 0.8380263329976598, -0.7192575784693592}, {-0.40334352493217457, -0.5966353626151273, 0.18203648506130554}, {-0.8566745932963743, 1.100604170903427, -1.0711873631091473}})
  local a, tau = la.geqrf(A)
  it('geqrf matches LAPACK through torch', function()
    assert.is_true(maxdiff(a, T({{-1.9383109038569977, 0.7392232896713936, 1.8564544181811962}, {0.16337485462009013, 1.7278395740608454, -0.6404101949532681}, {0.11592735168999392, -0.36227868908368016, 2.131796223791734}, {-0.11592639670179852, 0.2709686718790211, 0.10704338254673448}, {-0.24621989100612776, -0.3201421727538942, 0.8666104136993147}})) < 1e-12)
    assert.is_true(maxdiff(tau, T({1.7950200894901085, 1.5300335481781802, 1.1347698682804492})) < 1e-12)
    local a2, tau2 = A:geqrf()
    assert.is_true(maxdiff(a2, a) == 0 and maxdiff(tau2, tau) == 0)
  end)
  it('householder_product (orgqr) rebuilds Q, with gradients', function()
    local Q = T({{-0.7950200894901085, 0.17031005920021514, -0.2785456318741165}, {-0.2932611461605876, -0.502209167016006, -0.5515486435025602}, {-0.20809192520492417, 0.5740421422172899, 0.016267049958573934}, {0.2080902109819282, -0.43433458996533864, -0.22630015033657036}, {0.4419696507880642, 0.44789454028658854, -0.7528147513549569}})
    assert.is_true(maxdiff(la.householder_product(a, tau), Q) < 1e-12)
    assert.is_true(maxdiff(a:orgqr(tau), Q) < 1e-12)
    assert.is_true(dpl.autograd.gradcheck(function(x, t) return la.householder_product(x, t) end,
      { a:clone():requires_grad_(), tau:clone():requires_grad_() }))
  end)
  it('ormqr multiplies by Q or Q^T from either side', function()
    local C, D = T({{0.12270123916331216, -0.5663174751548546}, {0.37311463418249957, -0.8919953148065625}, {-1.509107744632202, 0.3703935333738153}, {1.4565026067903366, 0.9398099079535257}, {0.7748488177844168, 0.19186942747902466}}), T({{1.2637947253235853, -1.29043510317847, -0.7911026902762878, -0.020879472995974358, -0.7184800423600348}, {0.5186367489510352, -1.3125219619835629, 0.19199507185683629, 0.5427713494727768, -2.2187793699300005}})
    assert.is_true(maxdiff(dpl.ormqr(a, tau, C), T({{1.180517839648694, 0.5911070321137281}, {-0.3629083245864969, -0.10418648860355859}, {-0.28364295261141403, -0.43548571307243084}, {1.1704122454439225, 0.8904578639202562}, {1.4757451923069225, -0.9114788382771386}})) < 1e-12)
    assert.is_true(maxdiff(dpl.ormqr(a, tau, C, true, true), T({{0.7526067566648169, 0.915111140613026}, {-1.3183346843643737, 0.24188547667219196}, {-1.1774418746039146, 0.29862801616436546}, {0.8553661002540035, 1.0182575230244824}, {0.8549988535319974, -0.38942903772482806}})) < 1e-12)
    assert.is_true(maxdiff(a:ormqr(tau, D, false), T({{-0.7835768237265037, 0.09644439876665367, 0.8924517256973572, 0.955275468302693, 1.4396448831985242}, {-0.9350553024412024, -0.37182065843125844, 2.1300795018766334, 1.301735709576198, -0.04253414327271088}})) < 1e-12)
    assert.is_true(maxdiff(dpl.ormqr(a, tau, D, false, true), T({{-1.2829615195581503, 0.9875354967546401, -0.4555256201009674, 1.1763575420888166, 0.4385836044365874}, {-1.3413520639504815, 0.9600327505206744, 0.9411404693188392, 1.6597098963343535, -0.9406764328865042}})) < 1e-12)
  end)
  it('checks its arguments as PyTorch', function()
    raises(function() la.householder_product(dpl.ones(2, 3, f64), dpl.ones(2, f64)) end,
      'input.shape[-2] must be greater than or equal to input.shape[-1]')
    raises(function() la.householder_product(dpl.ones(3, 2, f64), dpl.ones(3, f64)) end,
      'input.shape[-1] must be greater than or equal to tau.shape[-1]')
    raises(function() dpl.ormqr(a, tau, dpl.ones(4, 2, f64)) end, 'other.shape[-2] must be equal to input.shape[-2] (5)')
  end)
end)

describe('parametrizations.orthogonal', function()
  local cases = {
    { map = 'matrix_exp', trivial = true, W0 = {{-0.004322517663240433, 0.3097158372402191, -0.4751853346824646}, {-0.4248946011066437, -0.2223689705133438, 0.15482072532176971}, {-0.011439144611358643, 0.45777493715286255, -0.05123639851808548}},
      W = {{-0.010168942095943878, 0.5581021099571379, -0.8297099658784626}, {-0.9995861051712919, -0.028004319226552443, -0.00658608025645413}, {-0.02691116803738641, 0.8292995797454906, 0.5581558886805872}},
      orig = {{-1.0, 0.0, 0.0}, {0.0, -1.0, 0.0}, {0.0, 0.0, -1.0}},
      grad = {{0.0, 0.0, 0.0}, {3.43272980108532, 0.0, 0.0}, {2.831858488459537, -4.634472426336887, 0.0}} },
    { map = 'matrix_exp', trivial = false, W0 = {{-0.55157071352005, -0.3823687434196472, -0.2379971146583557}, {0.021387115120887756, 0.22824688255786896, 0.34642332792282104}, {-0.3914094567298889, -0.25141456723213196, 0.2097034901380539}},
      W = {{0.9245491023705581, -0.06894263312105876, 0.3747744263475438}, {-0.02769778531855778, 0.968737813584698, 0.24653576052894655}, {-0.3800549828567473, -0.23831483770314021, 0.8937361177306662}},
      orig = {{-0.55157071352005, -0.3823687434196472, -0.2379971146583557}, {0.021387115120887756, 0.22824688255786896, 0.34642332792282104}, {-0.3914094567298889, -0.25141456723213196, 0.2097034901380539}},
      grad = {{0.0, 0.0, 0.0}, {-0.5650442028854903, 0.0, 0.0}, {0.017463414469980343, 0.9470293398755758, 0.0}} },
    { map = 'cayley', trivial = true, W0 = {{-0.09305925667285919, 0.06109179928898811, 0.5227769017219543}, {-0.5355907082557678, -0.3634638786315918, -0.14616501331329346}, {-0.22505110502243042, 0.4988310933113098, -0.3742266893386841}},
      W = {{-0.15816767499114515, 0.13476645743406476, 0.9781722693567673}, {-0.9103139236269249, -0.40366000993214546, -0.09158142187438134}, {-0.38250692417111687, 0.9049290570714663, -0.18652574789797427}},
      orig = {{-1.0, 0.0, 0.0}, {0.0, -1.0, 0.0}, {0.0, 0.0, -1.0}},
      grad = {{0.0, 0.0, 0.0}, {3.538012550151759, 0.0, 0.0}, {5.053030667951972, -0.5079763145513334, 0.0}} },
    { map = 'cayley', trivial = false, W0 = {{-0.33702272176742554, 0.4962891638278961, 0.2576242983341217}, {0.2798258066177368, 0.03036375157535076, -0.2959979474544525}, {0.09767881780862808, -0.539068877696991, -0.4171738028526306}},
      W = {{0.9598744503523841, -0.2315875660102975, -0.15813993433075227}, {0.2796920270138556, 0.8314934859873636, 0.4799905757256728}, {0.020332476130300012, -0.5049611688338106, 0.8629025486023336}},
      orig = {{-0.33702272176742554, 0.4962891638278961, 0.2576242983341217}, {0.2798258066177368, 0.03036375157535076, -0.2959979474544525}, {0.09767881780862808, -0.539068877696991, -0.4171738028526306}},
      grad = {{0.0, 0.0, 0.0}, {-2.761226788394185, 0.0, 0.0}, {-2.0400282588678715, 1.6809958667139124, 0.0}} },
    { map = 'householder', trivial = true, W0 = {{-0.2560519874095917, -0.020832175388932228, 0.3692505359649658}, {0.5739629864692688, 0.2291400283575058, 0.0779958963394165}, {0.38710546493530273, -0.3399451673030853, 0.10758577287197113}},
      W = {{-0.34688934500008495, -0.0447373415044051, 0.9368384880012831}, {0.7775828902750356, 0.5448013071449528, 0.3139369116314179}, {0.5244355356732933, -0.8373709488681039, 0.1541987772804863}},
      orig = {{-1.0, 0.0, 0.0}, {0.0, -1.0, 0.0}, {0.0, 0.0, -1.0}},
      grad = {{0.0, 0.0, 0.0}, {-4.495130290248088, 0.0, 0.0}, {-2.9208261318630884, 7.643738607018087, 0.0}} },
    { map = 'householder', trivial = false, W0 = {{0.26123541593551636, 0.232187420129776, -0.34199488162994385}, {0.17442160844802856, 0.31694912910461426, -0.0728716254234314}, {0.022044124081730843, 0.1337747722864151, 0.358174592256546}},
      W = {{0.8296207372182252, -0.4701442242848491, 0.30115418102541097}, {0.5539210021322719, 0.6254439049909529, -0.5495374828948864}, {0.07000682662617948, 0.6227233174382227, 0.7793039934098032}},
      orig = {{-1.0, -0.377557425169853, 0.2990165030222418}, {0.30275181673687157, -1.0, -0.3382534746775089}, {0.03826302643061348, 0.36243883502437135, -1.0}},
      grad = {{0.0, 0.0, 0.0}, {1.409559468221494, 0.0, 0.0}, {-7.170914708825619, -2.249019701089899, 0.0}} },
  }
  for _, c in ipairs(cases) do
    it(('%s, use_trivialization=%s: weight, original and gradient as PyTorch'):format(c.map, tostring(c.trivial)), function()
      local m = dpl.nn.Linear(3, 3, f64)
      dpl.no_grad(function() m.weight:copy_(T(c.W0)) end)
      P.orthogonal(m, 'weight', c.map, { use_trivialization = c.trivial })
      m(T({ { 1, 2, 3 } })):sum():backward()
      local orig = m.parametrizations.weight.original
      assert.is_true(maxdiff(m.weight, T(c.W)) < 1e-12)
      assert.is_true(maxdiff(orig, T(c.orig)) < 1e-12)
      assert.is_true(maxdiff(orig.grad, T(c.grad)) < 1e-12)
    end)
  end

  it('keeps wide and tall weights orthonormal through training steps (householder by default)', function()
    dpl.manual_seed(4)
    for _, shape in ipairs({ { 4, 3 }, { 3, 5 } }) do
      local m = dpl.nn.Linear(shape[1], shape[2], f64)
      P.orthogonal(m)
      local opt = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
      for _ = 1, 3 do
        opt:zero_grad()
        m(dpl.randn(2, shape[1], f64)):pow(2):sum():backward()
        opt:step()
      end
      local W = m.weight
      local G = W:size(1) < W:size(2) and W:matmul(W:t()) or W:t():matmul(W)
      assert.is_true(maxdiff(G, dpl.eye(G:size(1), f64)) < 1e-10)
    end
  end)

  it('assigning to the weight goes through right_inverse; bad arguments raise', function()
    local m = dpl.nn.Linear(3, 3, f64)
    P.orthogonal(m, 'weight', 'householder', { use_trivialization = false })
    local Q = la.qr(dpl.randn(3, 3, f64))
    m.weight = Q
    assert.is_true(maxdiff(m.weight, Q) < 1e-12)
    raises(function() P.orthogonal(dpl.nn.Linear(3, 3), 'weight', 'polar') end,
      "orthogonal_map has to be one of 'matrix_exp', 'cayley', 'householder'. Got: polar")
    raises(function() P.orthogonal(dpl.nn.Linear(3, 3), 'bias') end, 'Expected a matrix or batch of matrices')
    local e = dpl.nn.Linear(3, 3, f64)
    P.orthogonal(e, 'weight', 'matrix_exp', { use_trivialization = false })
    raises(function() e.weight = Q end, 'It is not possible to assign to the matrix exponential or the Cayley')
  end)
end)
