"""seer.xform: the random choices of seerd's image transform, and the tensor
PIL + torchvision would make from them.

    from seer.xform import Transform
    t = Transform("crop=random_resized size=224 hflip=0.5")   # the [transform] keys
    c = t.crop(seed, epoch, sample_id, width, height)
    # c.top, c.left, c.height, c.width, c.flip, c.resized_height, c.resized_width, c.tries
    x = t.reference(pil_image, seed, epoch, sample_id)       # a torch tensor

Every random choice of seerd's transform is a pure function of (job seed,
epoch, sample id): ``crop`` gives it for any sample, on any machine, and
``reference`` rebuilds the tensor with PIL + torchvision (resized_crop with
BILINEAR, hflip, to_tensor, normalize), so a delivered tensor can be checked.
seerd decodes JPEGs at a reduced DCT scale when the crop allows; its tensors
then differ from ``reference`` by the small amount docs/transform.md
measures (bit-identical in exact mode). Sizes are the image as decoded (PIL
does not apply EXIF rotation, nor does seer).

Uses libseer (found as seer.Loader finds it); ``reference`` needs torchvision.
"""

import collections
import ctypes

from . import _error, _load

__all__ = ["Transform", "Crop", "draw"]

CROP_FIELDS = 8

Crop = collections.namedtuple(
    "Crop", "top left height width flip resized_height resized_width tries")
Crop.__doc__ = """Crop box and flip of one sample. random_resized: the box in the
image (RandomResizedCrop.get_params' i, j, h, w), tries = the accepted attempt
1..10 or 0 for the fallback central crop. center: the image is resized to
resized_height x resized_width first and the box is in that image (negative
top/left: CenterCrop's zero padding). none: the whole image."""

_ready = False


def _lib():
    global _ready
    lib = _load()
    if not _ready:
        P, U64, U32, I = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int
        sigs = {
            "seer_xform_new": (P, [ctypes.c_char_p]),
            "seer_xform_free": (None, [P]),
            "seer_xform_crop": (I, [P, U64, U64, U64, U32, U32, ctypes.POINTER(ctypes.c_int32)]),
            "seer_xform_draw": (U64, [U64, U64, U64, U32]),
            "seer_xform_describe": (I, [P, ctypes.c_char_p, ctypes.c_size_t]),
        }
        for name, (res, args) in sigs.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        _ready = True
    return lib


def draw(seed, epoch, sample_id, index):
    """Raw 64-bit draw `index` of the stream of (seed, epoch, sample_id)."""
    return _lib().seer_xform_draw(seed, epoch, sample_id, index)


class Transform:
    """The [transform] section of a job, as a spec of "key=value" items
    ("crop=center resize=256 size=224"); unset keys take seerd's defaults."""

    def __init__(self, spec=""):
        self._lib = _lib()
        self._x = self._lib.seer_xform_new(spec.encode())
        if not self._x:
            raise _error(-22)
        buf = ctypes.create_string_buffer(1024)
        self._lib.seer_xform_describe(self._x, buf, len(buf))
        self.spec = buf.value.decode()
        self.params = dict(item.split("=", 1) for item in self.spec.split())

    def crop(self, seed, epoch, sample_id, width, height):
        """The Crop of sample `sample_id` in `epoch` for a width x height image."""
        out = (ctypes.c_int32 * CROP_FIELDS)()
        rc = self._lib.seer_xform_crop(self._x, seed, epoch, sample_id, width, height, out)
        if rc < 0:
            raise _error(rc)
        return Crop(*out[:CROP_FIELDS])

    def _size(self):
        h, w = self.params["size"].split("x")
        return [int(h), int(w)]

    def reference(self, image, seed, epoch, sample_id):
        """The tensor PIL + torchvision make for this sample: a torch tensor of
        the configured output (uint8 HWC, or float16/float32 CHW). `image` is a
        PIL image (converted to RGB as ImageFolder's loader does)."""
        import numpy as np
        import torch
        import torchvision.transforms.functional as F
        img = image.convert("RGB")
        c = self.crop(seed, epoch, sample_id, img.width, img.height)
        size, mode = self._size(), self.params["crop"]
        bilinear = F.InterpolationMode.BILINEAR
        if mode == "random_resized":
            img = F.resized_crop(img, c.top, c.left, c.height, c.width, size, bilinear)
        elif mode == "center":
            if int(self.params["resize"]) > 0:
                img = F.resize(img, [int(self.params["resize"])], bilinear)
            img = F.center_crop(img, size)
        else:
            img = F.resize(img, size, bilinear)
        if c.flip:
            img = F.hflip(img)
        out = self.params["output"]
        if out == "uint8_hwc":
            return torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))
        t = F.to_tensor(img)
        norm = self.params["normalize"]
        if norm != "none":
            m, s = norm.split("/")
            t = F.normalize(t, [float(v) for v in m.split(",")], [float(v) for v in s.split(",")])
        return t.half() if out == "float16_chw" else t

    def __del__(self):
        if getattr(self, "_x", None):
            self._lib.seer_xform_free(self._x)
            self._x = None
