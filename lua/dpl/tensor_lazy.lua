-- dpl.tensor_lazy: the names of dpl.tensor's lazily loaded modules, by module and kind
-- (functions: dpl.X, methods: t:X(), props: t.X). dpl.tensor loads a module the first time one
-- of its names is read (their Lua would otherwise sit in the heap every full collection
-- marks); spec/tensor_torch_api_spec.lua checks that each module installs exactly its names.
return {
  ['dpl.tensor_extra'] = {
    functions = [[adjoint argwhere atleast_1d atleast_2d atleast_3d block_diag broadcast_tensors broadcast_to
      bucketize cdist clamp_max clamp_max_ clamp_min clamp_min_ column_stack diff dstack einsum erfinv hstack hypot
      logaddexp logcumsumexp logit logit_ meshgrid multinomial nanquantile quantile randperm row_stack searchsorted
      take_along_dim tensordot tril_indices triu_indices unflatten vstack xlogy xlogy_]],
    methods = [[adjoint argwhere broadcast_to bucketize clamp_max_ clamp_min_ diff erfinv erfinv_ hypot hypot_
      logaddexp logcumsumexp logit logit_ multinomial nanquantile quantile squeeze_ t_ take_along_dim transpose_
      unflatten unsqueeze_ xlogy xlogy_]],
    props = [[mH mT]],
  },
  ['dpl.tensor_compat'] = {
    functions = [[absolute absolute_ arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2
      arctan_ arctanh arctanh_ bitwise_left_shift bitwise_right_shift conj conj_physical conj_physical_ copysign deg2rad
      deg2rad_ finfo fix fix_ float_power float_power_ frexp gcd gcd_ heaviside iinfo imag is_complex is_conj is_neg
      isin lcm lcm_ ldexp nextafter positive rad2deg rad2deg_ real renorm resolve_conj resolve_neg sgn signbit]],
    methods = [[__ilshift__ __irshift__ __lshift__ __rlshift__ __rrshift__ __rshift__ absolute absolute_ arccos
      arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_ arctan arctan2 arctan2_ arctan_ arctanh arctanh_
      bitwise_left_shift bitwise_left_shift_ bitwise_right_shift bitwise_right_shift_ char conj conj_physical
      conj_physical_ copysign copysign_ deg2rad deg2rad_ fix fix_ float_power float_power_ frexp gcd gcd_ heaviside
      heaviside_ is_complex is_conj is_neg is_pinned is_shared lcm lcm_ ldexp ldexp_ nextafter nextafter_ pin_memory
      positive rad2deg rad2deg_ renorm renorm_ resolve_conj resolve_neg sgn sgn_ share_memory_ short signbit]],
    props = [[imag itemsize nbytes real]],
  },
  ['dpl.tensor_more'] = {
    functions = [[addbmm cartesian_prod combinations corrcoef cov cumulative_trapezoid diag_embed dsplit histogram
      hsplit index_add index_reduce narrow_copy ravel scatter_reduce tensor_split trapezoid trapz vander vsplit]],
    methods = [[addbmm addbmm_ corrcoef cov diag_embed dsplit histogram hsplit index_add index_reduce index_reduce_
      narrow_copy ravel scatter_reduce scatter_reduce_ tensor_split vsplit]],
  },
  ['dpl.special'] = {
    functions = [[digamma erfc i0 igamma igammac lgamma mvlgamma polygamma sinc]],
    methods = [[digamma digamma_ erfc erfc_ i0 i0_ igamma igamma_ igammac igammac_ lgamma lgamma_ mvlgamma mvlgamma_
      polygamma polygamma_ sinc sinc_]],
  },
  ['dpl.linalg'] = {
    functions = [[chain_matmul cholesky cholesky_inverse cholesky_solve det geqrf inner inverse logdet lu lu_solve
      lu_unpack matrix_exp matrix_power orgqr ormqr pinverse qr slogdet svd triangular_solve vdot]],
    methods = [[cholesky cholesky_inverse cholesky_solve det geqrf inner inverse logdet lu lu_solve matrix_exp
      matrix_power orgqr ormqr pinverse qr slogdet svd triangular_solve vdot]],
  },
  ['dpl.tensor_api'] = {
    functions = [[addmv addmv_ addr angle as_strided_scatter clip_ dequantize diagflat diagonal_scatter divide eig fmax
      fmin greater greater_equal hardshrink int_repr is_inference is_nonzero is_same_size is_signed
      isneginf isposinf isreal istft less less_equal logaddexp2 lstsq msort multiply nanmedian negative_ not_equal
      prelu q_per_channel_axis q_per_channel_scales q_per_channel_zero_points q_scale q_zero_point qscheme
      select_scatter slice_scatter solve split_with_sizes stft subtract unique_consecutive unsafe_chunk
      unsafe_split]],
    methods = [[addmm_ addmv addmv_ addr addr_ align_as align_to angle apply_ as_strided_scatter cauchy_ cdouble cfloat
      chalf clip_ cumprod_ cumsum_ dequantize diagflat diagonal_scatter divide divide_ eig exponential_ floor_divide_
      fmax fmin geometric_ greater greater_ greater_equal greater_equal_ hardshrink has_names int_repr
      is_inference is_nonzero is_same_size is_signed isneginf isposinf isreal istft less less_ less_equal less_equal_
      log_normal_ logaddexp2 lstsq map2_ map_ msort multiply multiply_ nanmedian negative_ new new_empty_strided
      not_equal not_equal_ prelu q_per_channel_axis q_per_channel_scales q_per_channel_zero_points q_scale
      q_zero_point qscheme refine_names rename rename_ resize_ resize_as_ select_scatter slice_scatter solve
      split_with_sizes stft storage_type subtract subtract_ swapaxes_ swapdims_ to_sparse to_sparse_bsc
      to_sparse_bsr to_sparse_coo to_sparse_csc to_sparse_csr unique_consecutive unsafe_chunk unsafe_split]],
    props = [[H is_cpu is_meta is_mkldnn is_nested is_quantized is_sparse layout names]],
  },
}
