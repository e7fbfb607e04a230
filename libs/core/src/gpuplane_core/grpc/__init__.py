"""gRPC plumbing shared by every internal flow: error mapping, channel policy, server setup.

Import from the submodules (`gpuplane_core.grpc.errors`, `.client`, `.server`);
this package keeps no re-exports so importing one part does not pull in the others.
"""
