from kbackup.cli.main import main

main()
