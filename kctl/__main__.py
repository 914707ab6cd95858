from kctl.cli.main import main

main()
