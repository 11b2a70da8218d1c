"""The chat page: the conversation list, the messages as they stream, the composer with its documents, the header with the model and speed-up, the welcome."""
