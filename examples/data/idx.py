"""Read IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or not, with numpy.

    from idx import load_fashion_mnist
    train_x, train_y, test_x, test_y = load_fashion_mnist()   # Debian's dataset-fashion-mnist

Images come back as float32 pixel values divided by 255, shape (n, rows * cols), labels as int64.
That is the same scaling as Starling's built-in `mlp` problem, so models move between the two.

IDX: a big-endian header (two zero bytes, a type byte, the number of dimensions), one big-endian
uint32 per dimension, then the values in row-major order (type 0x08 = uint8).
"""

import gzip
import os

import numpy as np

# Debian's dataset-fashion-mnist, or the folder STARLING_FASHION_MNIST names (a copy elsewhere, as
# tools/gpu_check --bundle carries one to a machine without the package).
FASHION_MNIST_DIR = os.environ.get("STARLING_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")

_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """The array stored in an IDX file (.gz files are decompressed)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _TYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic {data[:4].hex()})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_TYPES[data[2]])
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != count * dtype.itemsize:
        raise ValueError(f"{path}: {len(data) - header} bytes of values, shape {shape} needs "
                         f"{count * dtype.itemsize}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def load_images_labels(images_path, labels_path):
    """(images as float32 / 255 of shape (n, pixels), labels as int64)."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images_path} has {images.shape[0]} images, {labels_path} "
                         f"{labels.shape[0]} labels")
    x = images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255)
    return x, labels.astype(np.int64)


def load_fashion_mnist(directory=FASHION_MNIST_DIR):
    """(train_x, train_y, test_x, test_y): 60,000 training and 10,000 test images."""
    def path(name):
        p = os.path.join(directory, name)
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p} not found: apt-get install dataset-fashion-mnist")
        return p
    train = load_images_labels(path("train-images-idx3-ubyte.gz"), path("train-labels-idx1-ubyte.gz"))
    test = load_images_labels(path("t10k-images-idx3-ubyte.gz"), path("t10k-labels-idx1-ubyte.gz"))
    return train + test
