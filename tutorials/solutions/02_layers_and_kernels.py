"""Reference solutions of step 2 (tutorials/02_layers_and_kernels.py)."""

from minips.kernels import conv as kconv


# Exercise 2.1
def conv2d_im2col(x, w, b, stride, padding):
    """x (N, C, H, W), w (K, C, R, S), b (K,) -> y (N, K, P, Q)."""
    g = kconv.geometry(x.shape, w.shape, stride, padding)
    cols = kconv.im2col(x, g)                       # (C*R*S, N*P*Q)
    y2 = w.reshape(g.K, -1) @ cols                  # (K, N*P*Q): one matrix product
    y = y2.reshape(g.K, g.N, g.P, g.Q).transpose(1, 0, 2, 3)
    return y + b[None, :, None, None]


# Exercise 2.2
def convnet_num_parameters(in_channels, image_size, num_classes, widths, hidden):
    H, W = image_size
    c1, c2 = widths
    conv1 = c1 * in_channels * 3 * 3 + c1
    conv2 = c2 * c1 * 3 * 3 + c2
    flat = c2 * (H // 2 // 2) * (W // 2 // 2)       # two 2x2 poolings, each rounding down
    fc1 = flat * hidden + hidden
    fc2 = hidden * num_classes + num_classes
    return conv1 + conv2 + fc1 + fc2
