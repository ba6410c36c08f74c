# dpl_py311_dataclass_fix.py: loaded (by a .pth file) into build/plref, the venv with
# PyTorch Lightning 1.9.5 over Debian's torch 1.13 (scripts/install-deps.sh --bench).
# torch 1.13's torch.distributed._shard declares a dataclass field whose default is an
# unhashable dataclass instance, which Python 3.11 refuses; Lightning 1.9 imports it.
# Such defaults become default_factory (a copy each time), as they behaved before 3.11.
import copy, dataclasses
_orig = dataclasses._get_field
def _fix(d):
    return (d is not dataclasses.MISSING and dataclasses.is_dataclass(d) and not isinstance(d, type)
            and d.__class__.__hash__ is None)
def _get_field(cls, a_name, a_type, *args):
    default = cls.__dict__.get(a_name, dataclasses.MISSING)
    if isinstance(default, dataclasses.Field):
        if _fix(default.default):
            d = default.default
            default.default = dataclasses.MISSING
            default.default_factory = lambda d=d: copy.deepcopy(d)
    elif _fix(default):
        setattr(cls, a_name, dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d)))
    return _orig(cls, a_name, a_type, *args)
dataclasses._get_field = _get_field
