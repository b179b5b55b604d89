"""Recipe ``kuramoto-sivashinsky``: autoregressive forecasting of 1-D spatio-temporal chaos, scored in Lyapunov times.

The package: ``config`` (sections), ``system`` (a trained run and its scores), ``training`` (``prepare``, the
Lyapunov estimate and the plot).

Data (``seqlab.data.kuramoto_sivashinsky``): the Kuramoto-Sivashinsky equation u_t + u u_x + u_xx + u_xxxx = 0 on a
periodic domain of length ``data.length`` (22) with ``data.grid`` (64) points, integrated by ETDRK4 (Kassam &
Trefethen, 2005) with step ``data.dt`` (0.25) from a small random field (``data.seed``) past a transient, and
sampled every step: a vector series of N values a step (or the user's field file, ``data.path``, with its
lambda_1 given as ``eval.lyapunov_exponent``), split in time (train, valid, test: the last
``test_fraction``) and standardised per grid point with the training part's statistics. The largest Lyapunov
exponent lambda_1 of the simulation is estimated by two trajectories (``seqlab.analysis.chaos``).

Model: ``seqlab.models.forecaster`` with the encoder ``model.arch`` (gru | gru_textbook | lstm | rnn | transformer |
tcn | ssm), residual by default, trained by mean squared error on windows of L_w fields and the next H. Test:
free-running forecasts of ``eval.vpt_steps`` steps (the model fed its own output) from origins ``eval.vpt_stride``
apart in the test part; valid prediction time in Lyapunov times (the normalised error ||u_hat - u|| / sqrt(<||u||^2>)
first above ``eval.vpt_threshold``; Pathak et al., 2018) against persistence and climatology; ``forecast.png``: truth,
forecast and error of the first test window, space against time.

``seqlab predict RUN FILE`` forecasts the H fields after the end of a field file (one step a line, N values);
``seqlab predict RUN test`` from the end of the run's own simulation. ``seqlab evaluate RUN --data FILE`` scores
free-running forecasts from a field file (steps dt apart) with the run's lambda_1.
"""

from seqlab.recipes.kuramoto_sivashinsky.config import (
    Config,
    DataConfig,
    EvalConfig,
    GRUArmConfig,
    GRUTextbookArmConfig,
    LSTMArmConfig,
    ModelConfig,
    RNNArmConfig,
    SSMArmConfig,
    TCNArmConfig,
    TransformerArmConfig,
)
from seqlab.recipes.kuramoto_sivashinsky.system import DYNAMICS_FILE, ChaosForecasts, FieldForecast, KSSystem
from seqlab.recipes.kuramoto_sivashinsky.training import PLOT_FILE, KSTraining, lyapunov_exponent, prepare

NAME = "kuramoto-sivashinsky"
DESCRIPTION = "Kuramoto-Sivashinsky chaos (ETDRK4, L=22): RNN/Transformer forecasts, valid time in Lyapunov times"
System = KSSystem

__all__ = [
    "DESCRIPTION",
    "DYNAMICS_FILE",
    "NAME",
    "PLOT_FILE",
    "ChaosForecasts",
    "Config",
    "DataConfig",
    "EvalConfig",
    "FieldForecast",
    "GRUArmConfig",
    "GRUTextbookArmConfig",
    "KSSystem",
    "KSTraining",
    "LSTMArmConfig",
    "ModelConfig",
    "RNNArmConfig",
    "SSMArmConfig",
    "System",
    "TCNArmConfig",
    "TransformerArmConfig",
    "lyapunov_exponent",
    "prepare",
]
