"""A diffusers DDPM pipeline on neuron, with a CPU generator (the CPU's images) and with a neuron
generator. `python examples/diffusers_ddpm.py`"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel  # noqa: E402

torch.manual_seed(0)
unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(32, 64), layers_per_block=1,
                   down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                   norm_num_groups=8)
pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50)).to("neuron")
for device in ("cpu", "neuron"):
    generator = torch.Generator(device=device).manual_seed(0)
    images = pipe(batch_size=2, generator=generator, num_inference_steps=10, output_type="np").images
    print(f"{device} generator: images {images.shape}, mean {images.mean():.4f}")
