"""Configuration values: the server's flags and the cluster settings it honours. Pure: the
stored, live cluster settings are the store's (store/cluster).

    server       ServerSettings (flags) and the table of cluster settings we honour
    endpoints    the endpoint guard those settings configure: which URLs connectors may call
"""
