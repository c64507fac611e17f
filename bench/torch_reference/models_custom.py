"""Models with no Hugging Face class that the reference harness measures, written
here as plain torch.nn.Modules (torch only, no transformers).

UNet: a diffusion UNet's shape (DDPM-style, epsilon prediction), small enough for
the CPU: a 3x3 input conv, then per resolution level `num_res_blocks` ResBlocks
(GroupNorm -> SiLU -> conv3x3, plus a projection of the timestep embedding added
per channel, GroupNorm -> SiLU -> conv3x3, a 1x1 conv on the skip path when the
channel count changes) and a stride-2 conv down; a middle of ResBlock,
AttentionBlock (GroupNorm, 1x1-conv q/k/v, multi-head SDPA over the H*W
positions, 1x1-conv output, residual) and ResBlock at the lowest resolution;
then per level, deepest first, `num_res_blocks + 1` ResBlocks each taking the
channel concatenation of the running tensor and one saved skip (the skips are
the input conv's output and every down-path ResBlock's and downsampler's
output, used last-in first-out), and a nearest 2x upsample with a 3x3 conv;
finally GroupNorm -> SiLU -> conv3x3 to `out_channels`.

The timestep t (int64, shape (B,)) becomes a sinusoidal embedding of
`base_channels` features (half sin, half cos, frequencies
10000^(-i / (base_channels/2))), then Linear(base, 4 base) -> SiLU ->
Linear(4 base, 4 base); each ResBlock maps it with SiLU -> Linear(4 base,
C_out). The sinusoid is computed in fp32 and cast to the time MLP's weight
dtype (bf16 under FSDP2's param_dtype=bf16).

Module registration order is forward order (input conv, time MLP, down path,
middle, up path, output), so FSDP2 units listed in named_modules() order are in
forward order. No dropout anywhere.

Shapes: x (B, in_channels, S, S) with S = image_size divisible by
2^(len(channel_mult) - 1); output (B, out_channels, S, S).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def _norm(channels, groups):
    if channels % groups:
        raise ValueError("GroupNorm: %d channels do not divide into %d groups" % (channels, groups))
    return nn.GroupNorm(groups, channels, eps=1e-5)


class ResBlock(nn.Module):
    """x (B, C_in, H, W), temb (B, 4 base) -> (B, C_out, H, W)."""

    def __init__(self, in_channels, out_channels, temb_channels, groups):
        super().__init__()
        self.norm1 = _norm(in_channels, groups)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.temb_proj = nn.Linear(temb_channels, out_channels)
        self.norm2 = _norm(out_channels, groups)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.skip = (nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels
                     else nn.Identity())

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class AttentionBlock(nn.Module):
    """Self-attention over the H*W positions: x (B, C, H, W) -> same shape;
    heads of C / num_heads channels, non-causal SDPA, no mask."""

    def __init__(self, channels, num_heads, groups):
        super().__init__()
        if channels % num_heads:
            raise ValueError("AttentionBlock: %d channels, %d heads" % (channels, num_heads))
        self.num_heads = num_heads
        self.norm = _norm(channels, groups)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x))                      # (B, 3C, H, W)
        qkv = qkv.reshape(b, 3, self.num_heads, c // self.num_heads, h * w)
        q, k, v = qkv.permute(1, 0, 2, 4, 3).unbind(0)     # each (B, heads, HW, C/heads)
        a = F.scaled_dot_product_attention(q, k, v)        # (B, heads, HW, C/heads)
        a = a.transpose(2, 3).reshape(b, c, h, w)
        return x + self.proj(a)


class Downsample(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


class Upsample(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UNet(nn.Module):
    def __init__(self, in_channels=3, out_channels=3, image_size=32, base_channels=128,
                 channel_mult=(1, 2, 2), num_res_blocks=2, num_heads=4, groups=32):
        super().__init__()
        levels = len(channel_mult)
        if image_size % (2 ** (levels - 1)):
            raise ValueError("UNet: image_size %d is not divisible by 2^%d"
                             % (image_size, levels - 1))
        if base_channels % 2:
            raise ValueError("UNet: base_channels must be even (sin and cos halves)")
        self.base_channels = base_channels
        temb = 4 * base_channels
        self.conv_in = nn.Conv2d(in_channels, base_channels, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(base_channels, temb), nn.SiLU(),
                                      nn.Linear(temb, temb))
        self.down = nn.ModuleList()
        # Whether each down/up module is a ResBlock (takes temb): decided here, not by
        # isinstance in forward, since a checkpoint wrapper replaces the module.
        self.down_is_res, self.up_is_res = [], []
        skip_channels = [base_channels]
        ch = base_channels
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                self.down.append(ResBlock(ch, base_channels * mult, temb, groups))
                self.down_is_res.append(True)
                ch = base_channels * mult
                skip_channels.append(ch)
            if level != levels - 1:
                self.down.append(Downsample(ch))
                self.down_is_res.append(False)
                skip_channels.append(ch)
        self.mid_block1 = ResBlock(ch, ch, temb, groups)
        self.mid_attn = AttentionBlock(ch, num_heads, groups)
        self.mid_block2 = ResBlock(ch, ch, temb, groups)
        self.up = nn.ModuleList()
        for level, mult in reversed(list(enumerate(channel_mult))):
            for _ in range(num_res_blocks + 1):
                self.up.append(ResBlock(ch + skip_channels.pop(), base_channels * mult, temb,
                                        groups))
                self.up_is_res.append(True)
                ch = base_channels * mult
            if level != 0:
                self.up.append(Upsample(ch))
                self.up_is_res.append(False)
        assert not skip_channels
        self.norm_out = _norm(ch, groups)
        self.conv_out = nn.Conv2d(ch, out_channels, 3, padding=1)

    def timestep_embedding(self, t):
        """t (B,) int64 -> (B, base_channels) sinusoid, in the time MLP's dtype."""
        half = self.base_channels // 2
        freqs = torch.exp(-math.log(10000.0) *
                          torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t.float()[:, None] * freqs[None, :]
        emb = torch.cat([torch.sin(args), torch.cos(args)], dim=1)
        return emb.to(self.time_mlp[0].weight.dtype)

    def forward(self, x, t):
        temb = self.time_mlp(self.timestep_embedding(t))
        h = self.conv_in(x)
        skips = [h]
        for m, is_res in zip(self.down, self.down_is_res):
            h = m(h, temb) if is_res else m(h)
            skips.append(h)
        h = self.mid_block2(self.mid_attn(self.mid_block1(h, temb)), temb)
        for m, is_res in zip(self.up, self.up_is_res):
            if is_res:
                h = m(torch.cat([h, skips.pop()], dim=1), temb)
            else:
                h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


# name -> (class, the classes wrapped as FSDP units / checkpointed, in the harness)
CUSTOM_MODELS = {"UNet": (UNet, ("ResBlock", "AttentionBlock"))}
