"""Recipe ``fields``: forecasting a 2-D field a few steps ahead with a spatio-temporal patch Transformer, scored by
RMSE and anomaly correlation by lead time against persistence and climatology.

The package: ``config`` (sections), ``system`` (a trained run, its forecasts and scores), ``training`` (``prepare``
and the plot).

Data (``seqlab.data.kolmogorov_flow``): two-dimensional Kolmogorov flow, the vorticity equation forced by
-n cos(n y) on the periodic [0, 2 pi)^2 (Chandler & Kerswell, 2013: n = 4, Re = ``data.reynolds_number`` = 40, a
chaotic flow), solved pseudo-spectrally on ``data.grid`` x ``data.grid`` points (32, dealiased by the 2/3 rule) with
ETDRK4 steps of ``data.dt`` (0.1), ``data.members`` (24) independent trajectories from smooth random fields, each
sampled every ``data.steps_per_sample`` steps (0.5 time units) for ``data.samples`` fields after a transient; or the
user's field file (``data.path``: one field a line, grid x grid values row by row), one trajectory. Each trajectory
is split in time (train, valid, test: the last ``test_fraction``) and standardised per grid point with the training
parts' statistics, whose mean field is the climatology.

Model: ``seqlab.models.field_forecaster.FieldTransformer`` (ViT patch embedding, divided space-time attention with
``seqlab.nn`` encoder layers, causal in time; a linear head back to patches, residual), trained by mean squared
error on windows of T fields and the next H. Test: forecasts of leads 1..``eval.max_lead`` (fed back H at a time
past H) from origins ``eval.stride`` apart in every test part; RMSE and anomaly correlation (ACC, against the
climatology) by lead of the model, persistence (the last field) and climatology; ``forecast.png``: truth, forecast
and error of the first test forecast at ``eval.plot_leads``, with the scores by lead.

``seqlab predict RUN FILE`` forecasts the H fields after the end of a field file; ``seqlab predict RUN test`` after
the end of the run's own last trajectory. ``seqlab evaluate RUN --data FILE`` scores forecasts from a field file.
"""

from seqlab.recipes.fields.config import Config, DataConfig, EvalConfig, ModelConfig
from seqlab.recipes.fields.system import SCALING_FILE, FieldForecast, FieldForecasts, FieldSystem, read_fields
from seqlab.recipes.fields.training import PLOT_FILE, FieldTraining, prepare

NAME = "fields"
DESCRIPTION = "2-D Kolmogorov flow (pseudo-spectral): patch Transformer forecasts, RMSE and ACC by lead vs persistence"
System = FieldSystem

__all__ = [
    "DESCRIPTION",
    "NAME",
    "PLOT_FILE",
    "SCALING_FILE",
    "Config",
    "DataConfig",
    "EvalConfig",
    "FieldForecast",
    "FieldForecasts",
    "FieldSystem",
    "FieldTraining",
    "ModelConfig",
    "System",
    "prepare",
    "read_fields",
]
