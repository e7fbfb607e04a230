from gpuplane_controller.cli import main

main()
