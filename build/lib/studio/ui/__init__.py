"""The Gradio page: layout and thin handlers over studio.backend."""
