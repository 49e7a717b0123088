from experiments.report.report import main

main()
