from colibri.cli.main import main

main()
