from swarmfab.cli import app

app()
