"""The tracker sinks behind ``tracking=[...]`` (fedrun/storage/tracking.py chooses them): TensorBoard, MLflow and
Weights & Biases. Each module imports its library only when its tracker is opened."""
