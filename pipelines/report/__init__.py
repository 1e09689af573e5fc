"""The daily report: HTML/Markdown/JSON, its charts, and delivery to chat."""
