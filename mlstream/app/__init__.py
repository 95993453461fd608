"""The composition root and the command line: what builds a server from its parts.

    compose      a server: store, registry, predictor, fronts and transport wired together
    workers      --workers N: the supervisor of worker processes sharing one port
    config       where serve's settings come from: flags > environment > TOML file
    cli          the mlstream command
    demo         mlstream demo: a fake provider, the server, one streamed answer
"""
