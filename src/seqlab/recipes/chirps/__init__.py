"""Recipe ``chirps``: denoising simulated gravitational-wave inspiral chirps in coloured detector noise.

The package: ``config`` (sections), ``system`` (a trained run, the simulated series, the Wiener and band-pass
baselines and the scores), ``training`` (``prepare`` and the plot).

Data (``seqlab.data.gravitational_waves``): leading-order (Newtonian) inspiral chirps, f(tau) proportional to
tau^(-3/8) and amplitude to f^(2/3) (Maggiore 2008, Sec. 4.1), cut at ``data.f_max``, with chirp masses, end times
and phases drawn uniformly; Gaussian noise of an Advanced-LIGO-shaped PSD (Ajith 2011's fit); everything whitened
with that PSD, so that the noise is white with unit variance and a chirp of matched-filter SNR rho has a whitened
norm of rho. Training chirps get fresh noise and SNRs (uniform in [data.snr_min, data.snr_max]) every epoch; or
the training and validation series are the user's (``data.path``: strain and clean signal a line), the test series
simulated as ever.

Model: ``seqlab.models.denoiser`` (a bidirectional recurrent regressor over frames, ``model.arch``: gru | gru_textbook
| lstm | rnn), trained by mean squared error against the clean whitened chirp. Test, at each SNR of ``eval.snrs``: the
overlap (normalised inner product at zero lag, noise-weighted through the whitening) and the output SNR 10
log10(||s||^2 / ||s_hat - s||^2) (dB) of the model's estimates, of a Wiener filter (gain rho^2 P_k / (rho^2 P_k + n),
P_k the training chirps' mean power spectrum, rho the series' true SNR: an oracle's advantage) and of a Butterworth
band-pass; ``denoised.png``: a test series and the overlap against the input SNR.

``seqlab predict RUN FILE`` denoises a strain file (one sample a line, data.sample_rate apart); ``seqlab evaluate
RUN --data FILE`` scores a two-column file (data, clean signal) cut into series of data.samples samples.
"""

from seqlab.recipes.chirps.config import (
    Config,
    DataConfig,
    EvalConfig,
    GRUDenoiserConfig,
    GRUTextbookDenoiserConfig,
    LSTMDenoiserConfig,
    ModelConfig,
    RNNDenoiserConfig,
)
from seqlab.recipes.chirps.system import (
    FILTERS_FILE,
    ChirpSystem,
    Denoised,
    Strain,
    add_noise,
    draw_chirps,
    read_pairs,
)
from seqlab.recipes.chirps.training import PLOT_FILE, ChirpTraining, prepare

NAME = "chirps"
DESCRIPTION = "gravitational-wave chirps in aLIGO-like noise: BiRNN denoiser vs Wiener and band-pass, overlap by SNR"
System = ChirpSystem

__all__ = [
    "DESCRIPTION",
    "FILTERS_FILE",
    "NAME",
    "PLOT_FILE",
    "ChirpSystem",
    "ChirpTraining",
    "Config",
    "DataConfig",
    "Denoised",
    "EvalConfig",
    "GRUDenoiserConfig",
    "GRUTextbookDenoiserConfig",
    "LSTMDenoiserConfig",
    "ModelConfig",
    "RNNDenoiserConfig",
    "Strain",
    "System",
    "add_noise",
    "draw_chirps",
    "prepare",
    "read_pairs",
]
