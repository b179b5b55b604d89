"""Recipe ``forecast``: multi-step forecasting of a (multivariate) series from its last L steps.

The package: ``config`` (sections), ``data`` (the series, split and standardised), ``system`` (a trained run),
``training`` (``prepare`` and the training parts), ``evaluation`` (scores, baselines, plot).

Data (``data.series``; ``seqlab.data.forecasting``): yearly sunspots (m = 11), monthly Mauna Loa CO2 (m = 12),
monthly El Nino sea-surface temperatures (m = 12), all shipped by statsmodels, or a simulated Lorenz-63 system
(C = 3, m = 1); or the user's file (``data.path``: one step a line, C numbers). The series is split in time order
(train, valid, test: the last ``test_fraction``); each channel is standardised with the training part's mean and
standard deviation only. Windows: L inputs, the next H targets; validation and test windows have their targets in
their part (their inputs may reach back), and test origins are ``data.test_stride`` steps apart.

Model: ``seqlab.models.forecaster`` (``model.arch``: rnn | gru | gru_textbook | lstm | transformer | tcn | ssm, direct
or autoregressive head; residual, i.e. forecasting changes from the last value, by default for Lorenz and the trending
CO2 series, whose test values lie above every training value that the scaler saw), trained by mean squared error on
the standardised values. Test scores (``forecast.evaluation``): RMSE, MAE (the series' units) and MASE for the model
and, on the same windows, persistence, seasonal naive and a SARIMA fitted on the training part; for Lorenz also the
valid prediction time (Lyapunov times) of free-running forecasts of ``eval.vpt_steps`` steps. ``forecast.png`` in the
run directory plots test windows against the truth.

``seqlab predict RUN FILE`` forecasts the H steps after the end of a series file (one line a step, C values
separated by spaces); ``seqlab predict RUN test`` forecasts from the end of the test split's input (the last
L steps of the series). ``seqlab evaluate RUN --data FILE`` scores every window of a series file.
"""

from seqlab.recipes.forecast.config import (
    FILE_DEFAULTS,
    RESIDUAL_SERIES,
    SERIES_DEFAULTS,
    Config,
    DataConfig,
    EvalConfig,
    GRUArmConfig,
    GRUTextbookArmConfig,
    LSTMArmConfig,
    ModelConfig,
    RNNArmConfig,
    SeriesDefaults,
    SSMArmConfig,
    TCNArmConfig,
    TransformerArmConfig,
)
from seqlab.recipes.forecast.data import Prepared, prepare_series
from seqlab.recipes.forecast.system import SCALING_FILE, Forecast, ForecastSystem
from seqlab.recipes.forecast.training import PLOT_FILE, ForecastTraining, prepare

NAME = "forecast"
DESCRIPTION = (
    "forecast sunspots, CO2, El Nino (statsmodels) or Lorenz-63: RNN/Transformer/TCN vs naive and SARIMA, MASE"
)
System = ForecastSystem

__all__ = [
    "DESCRIPTION",
    "FILE_DEFAULTS",
    "NAME",
    "PLOT_FILE",
    "RESIDUAL_SERIES",
    "SCALING_FILE",
    "SERIES_DEFAULTS",
    "Config",
    "DataConfig",
    "EvalConfig",
    "Forecast",
    "ForecastSystem",
    "ForecastTraining",
    "GRUArmConfig",
    "GRUTextbookArmConfig",
    "LSTMArmConfig",
    "ModelConfig",
    "Prepared",
    "RNNArmConfig",
    "SSMArmConfig",
    "SeriesDefaults",
    "System",
    "TCNArmConfig",
    "TransformerArmConfig",
    "prepare",
    "prepare_series",
]
