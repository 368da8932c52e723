"""The operator dashboard: a Streamlit app over the result tables (`gpuwaste dashboard`)."""
