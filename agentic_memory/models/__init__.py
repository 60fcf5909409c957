"""Model providers: chat models, embeddings, the offline local model and cost accounting."""
