"""The log agent: realistic nginx access-log events (filebeat-style JSON) and a file shipper."""
