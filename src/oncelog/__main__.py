from oncelog.cli import main

main()
